"""What a deployment decides before starting anything: its folder inside and outside SLURM, which
node must run it, the addresses and the Ceph configuration (no daemons here; test_ceph.py runs them)."""
import os
from pathlib import Path

import pytest

from hpcsuite.runtime import InputError
from hpcsuite.staging import default_dir
from hpcsuite.staging.ceph import deploy, node_address
from hpcsuite.staging.cephconf import parse_size, render_conf


def test_default_dir_outside_and_inside_slurm(monkeypatch, tmp_path):
    for k in [k for k in os.environ if k.startswith("SLURM_")] + ["HPCSUITE_STAGE_DIR"]:
        monkeypatch.delenv(k, raising=False)
    assert default_dir() == Path(f"/dev/shm/hpcsuite-stage-{os.getuid()}-local")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n1")
    assert default_dir() == Path(f"/dev/shm/hpcsuite-stage-{os.getuid()}-job42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-3]")                 # keys must be shared
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(tmp_path))
    assert default_dir() == tmp_path / ".hpcsuite-stage-job42"
    monkeypatch.setenv("HPCSUITE_STAGE_DIR", "/somewhere")
    assert default_dir() == Path("/somewhere")


def test_multi_node_deploy_must_run_on_the_head_node(tmp_path):
    with pytest.raises(InputError, match="first node of the allocation"):
        deploy(tmp_path / "d", "rados", nodes=["not-this-host-1", "not-this-host-2"])
    assert not (tmp_path / "d").exists()


def test_bad_arguments_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(InputError, match="--backend"):
        deploy(tmp_path / "d", "nfs")
    with pytest.raises(InputError, match="--store"):
        deploy(tmp_path / "d", "rados", objectstore="filestore")
    with pytest.raises(InputError, match="--osd-size >= 64M"):
        deploy(tmp_path / "d", "rados", osd_bytes=1 << 20)
    with pytest.raises(InputError, match=r">= 384M for --store bluestore"):   # bluestore's mkfs fails at 256M
        deploy(tmp_path / "d", "rados", osd_bytes=256 << 20)
    assert not (tmp_path / "d").exists()


def test_loopback_only_names_are_refused_for_multi_node():
    with pytest.raises(InputError, match="loopback"):
        node_address("localhost")


@pytest.mark.parametrize("text,want", [("1G", 1 << 30), ("512M", 512 << 20), ("4GiB", 4 << 30),
                                       ("1.5G", 3 << 29), ("1048576", 1 << 20), (7, 7)])
def test_parse_size(text, want):
    assert parse_size(text) == want


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError, match="bad size 'lots'"):
        parse_size("lots")


def test_conf_is_private_and_authenticated(tmp_path):
    conf = render_conf(fsid="f", mon_addr="127.0.0.1", ports=(4000, 4001), state_dir=tmp_path / "s",
                       node_dir=Path("/dev/shm/n"), objectstore="bluestore", osd_bytes=1 << 30, single_node=True)
    for line in ("auth cluster required = cephx", "auth client required = cephx",
                 "mon host = [v2:127.0.0.1:4000,v1:127.0.0.1:4001]", "public network = 127.0.0.1/32",
                 "osd data = /dev/shm/n/$name", f"keyring = {tmp_path / 's'}/client.admin.keyring",
                 "bluestore block size = 1073741824"):
        assert line in conf
    multi = render_conf(fsid="f", mon_addr="10.0.0.1", ports=(4000, 4001), state_dir=tmp_path, node_dir=tmp_path,
                        objectstore="memstore", osd_bytes=1 << 30, single_node=False)
    assert "public network" not in multi and "osd objectstore = memstore" in multi

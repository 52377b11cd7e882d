"""``stage up --iface/--address`` and the RAM budget: which network the Ceph daemons bind to, and the
checks that refuse a deployment before anything starts (an interface that does not exist or has no
IPv4 address, OSDs that do not fit in /dev/shm). The Ceph tests start real clusters (run them one
at a time: ``flock /tmp/hpcsuite-ceph.lock``); a second named interface on a loopback-range address
(127.0.0.2 on an ``ifb`` device) is created for one test when this process may (root)."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import HPCSUITE
from hpcsuite.runtime import InputError
from hpcsuite.staging import down, netif, open_store, preflight, procs, up
from hpcsuite.staging.radosstore import rados_client

CEPH = Path("/usr/bin/ceph-mon").exists()
need_ceph = pytest.mark.skipif(not CEPH, reason="Ceph not installed (scripts/setup.sh installs it)")


def _processes_mentioning(text: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                cmd = p.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if text in cmd and procs.alive(procs.Proc("?", int(p.name), 0, "")):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def _ceph_node_dirs() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("hpcsuite-ceph-*")}


# ---------------------------------------------------------------------- interfaces (no Ceph)
def test_interfaces_from_psutil_and_from_the_standard_library_agree(monkeypatch):
    with_psutil = netif.interfaces()
    assert ("127.0.0.1", 8) in with_psutil["lo"]
    monkeypatch.setitem(sys.modules, "psutil", None)          # import psutil -> ImportError
    plain = netif.interfaces()
    assert set(plain) == set(with_psutil)
    for name, addrs in plain.items():                          # the primary address of each
        assert addrs == with_psutil[name][:1], name


def test_iface_and_address_choose_the_address_and_network():
    b = netif.resolve(iface="lo")
    assert (b.address, b.network, b.iface) == ("127.0.0.1", "127.0.0.0/8", "lo")
    assert b.local_address("n1") == "127.0.0.1"
    assert netif.resolve(address="127.0.0.1") == netif.Binding("127.0.0.1", "127.0.0.0/8", None)
    assert netif.resolve(address="127.0.0.0/8") == netif.Binding("127.0.0.1", "127.0.0.0/8", None)
    assert netif.resolve(iface="lo", address="127.0.0.1/32") == netif.Binding("127.0.0.1", "127.0.0.1/32", "lo")
    assert netif.resolve() is None
    assert b.agent_args() == ["--network", "127.0.0.0/8", "--iface", "lo"]


def _no_ipv4_interface():
    return next((n for n, v in sorted(netif.interfaces().items()) if not v), None)


@pytest.mark.parametrize("kw,match", [
    (dict(iface="hpcs-nope0"), r"--iface hpcs-nope0: no such network interface on n1 \(interfaces: .*lo 127\.0\.0\.1"),
    (dict(address="10.255.255.254"), r"--address 10\.255\.255\.254 is not an address of this node \(n1\)"),
    (dict(address="not-an-ip"), r"--address 'not-an-ip' is not an IPv4 address or network"),
    (dict(address="10.255.0.0/16"), r"no interface has an address in the network 10\.255\.0\.0/16 on n1"),
    (dict(iface="lo", address="10.255.0.0/16"), r"--iface lo has no address in the network 10\.255\.0\.0/16"),
    (dict(iface="eth0/1"), r"is not a network interface name"),
])
def test_a_network_that_is_not_here_is_refused_naming_the_interfaces(kw, match):
    with pytest.raises(InputError, match=match) as e:
        netif.resolve(node="n1", **kw)
    assert "\n" not in str(e.value)


def test_an_interface_without_ipv4_is_refused():
    name = _no_ipv4_interface()
    if name is None:
        pytest.skip("this machine has no interface without an IPv4 address")
    with pytest.raises(InputError, match=rf"--iface {name} has no IPv4 address on n1 \(interfaces: "):
        netif.resolve(iface=name, node="n1")


# ---------------------------------------------------------------------- RAM budget (no Ceph)
def test_the_budget_counts_every_osd_and_the_head_daemons():
    g = 1 << 30
    assert preflight.needs(g, 2, "bluestore", head=False) == {"shm": 2 * g + 2 * preflight.OSD_OVERHEAD, "memory": 0}
    assert preflight.needs(g, 2, "bluestore", head=True)["shm"] == \
        2 * g + 2 * preflight.OSD_OVERHEAD + preflight.HEAD_RESERVE
    assert preflight.needs(g, 2, "memstore", head=False) == {"shm": 2 * preflight.OSD_OVERHEAD, "memory": 2 * g}


def test_a_budget_beyond_free_shm_is_refused_and_one_that_fits_passes():
    free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
    ok = preflight.check_nodes(["n1"], "n1", 64 << 20, 1, "bluestore", netif.resolve(iface="lo"))
    assert ok["n1"]["error"] is None and ok["n1"]["address"] == "127.0.0.1"
    too_much = free - preflight.HEAD_RESERVE - preflight.OSD_OVERHEAD + (1 << 20)   # 1 MiB over
    with pytest.raises(InputError, match=r"need .* in /dev/shm on n1, which has .* free; nothing was started"):
        preflight.check_nodes(["n1"], "n1", too_much, 1, "bluestore", None)


# ---------------------------------------------------------------------- the command line
@pytest.mark.parametrize("args,match", [
    (["--iface", "hpcs-nope0"], "stage up: --iface hpcs-nope0: no such network interface on "),
    (["--osd-size", "100T"], "need 100.0 TiB in /dev/shm on "),
    (["--osd-size", "40T", "--osds-per-node", "3"], "3 OSD(s) x --osd-size 40.0 TiB + monitor/manager need 120.0 TiB"),
    (["--address", "10.255.255.254"], "stage up: --address 10.255.255.254 is not an address of this node"),
])
@need_ceph
def test_cli_refuses_with_one_line_and_starts_no_daemon(args, match, tmp_path):
    before = _ceph_node_dirs()
    d = tmp_path / "dep"
    p = subprocess.run([HPCSUITE, "stage", "up", "--backend", "rados", "--dir", d, *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = (p.stdout + p.stderr).strip().splitlines()
    assert len(lines) == 1 and match in lines[0], lines
    assert not d.exists() and _ceph_node_dirs() == before
    assert _processes_mentioning(str(d)) == []


def test_iface_with_tmpfs_is_refused(tmp_path):
    p = subprocess.run([HPCSUITE, "stage", "up", "--iface", "lo", "--dir", tmp_path / "t"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and not (tmp_path / "t").exists()
    assert p.stderr.strip().endswith("stage up: --iface applies to the Ceph backends (--backend rados, s3 or "
                                     "cephfs); tmpfs runs no daemon"), p.stderr


# ---------------------------------------------------------------------- real clusters
def _round_trip(d: Path) -> None:
    with open_store(d) as s:
        s.put_bytes("bind/x", b"bound" * 1000)
        assert s.get_bytes("bind/x") == b"bound" * 1000


def _bound_addresses(conf: str) -> dict[str, set[str]]:
    """The addresses the monitor, manager and OSDs listen on, as the monitor's maps record them."""
    c = rados_client(conf, timeout=10)
    try:
        def cmd(prefix):
            rc, out, err = c.mon_command(json.dumps({"prefix": prefix, "format": "json"}), b"", timeout=10)
            assert rc == 0, err
            return json.loads(out)
        addrs = {"mon": {a["addr"].rsplit(":", 1)[0] for m in cmd("mon dump")["mons"]
                         for a in m["public_addrs"]["addrvec"]},
                 "mgr": {a["addr"].rsplit(":", 1)[0] for a in cmd("mgr dump")["active_addrs"]["addrvec"]},
                 "osd": {a["addr"].rsplit(":", 1)[0] for o in cmd("osd dump")["osds"]
                         for k in ("public_addrs", "cluster_addrs") for a in o[k]["addrvec"]}}
    finally:
        c.shutdown()
    return addrs


def _down_and_check(d: Path, st: dict) -> None:
    down(d)
    assert not Path(st["node_dir"]).exists() and not d.exists()
    assert _processes_mentioning(st["conf"]) == []


@need_ceph
@pytest.mark.timeout(240)
def test_iface_lo_binds_every_daemon_there(tmp_path):
    d = tmp_path / "dep"
    st = up(d, "rados", osd_bytes=1 << 30, timeout=90, log=lambda m: None, iface="lo")
    try:
        assert st["binding"] == {"address": "127.0.0.1", "network": "127.0.0.0/8", "iface": "lo"}
        conf = Path(st["conf"]).read_text()
        assert "public network = 127.0.0.0/8" in conf and "public network interface = lo" in conf
        assert _bound_addresses(st["conf"]) == {"mon": {"127.0.0.1"}, "mgr": {"127.0.0.1"}, "osd": {"127.0.0.1"}}
        _round_trip(d)
        p = subprocess.run([HPCSUITE, "stage", "status", "--dir", d], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and f"network   127.0.0.0/8 on lo ({socket.gethostname().split('.')[0]} " \
            "127.0.0.1)" in p.stdout, p.stdout + p.stderr
    finally:
        _down_and_check(d, st)


@pytest.fixture
def second_interface():
    """An ``ifb`` interface holding 127.0.0.2/8 (loopback range: traffic stays on this machine),
    removed afterwards; skips when it cannot be made here (not root, no ``ip``, no ifb support)."""
    name = f"hpcs{os.getpid() % 100000}"
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("creating a network interface needs root and iproute2's ip")
    made = subprocess.run(["ip", "link", "add", name, "type", "ifb"], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create an ifb interface here: {made.stderr.strip()}")
    try:
        for cmd in (["ip", "addr", "add", "127.0.0.2/8", "dev", name], ["ip", "link", "set", name, "up"]):
            subprocess.run(cmd, check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    assert name not in netif.interfaces()


@need_ceph
@pytest.mark.timeout(240)
def test_a_second_interface_gets_the_daemons_and_loopback_does_not(second_interface, tmp_path):
    d = tmp_path / "dep"
    st = up(d, "s3", osd_bytes=1 << 30, timeout=120, log=lambda m: None, iface=second_interface)
    try:
        assert st["mon_addr"] == "127.0.0.2" and st["binding"]["iface"] == second_interface
        assert st["s3"]["endpoint"].startswith("http://127.0.0.2:")          # the gateway too
        assert _bound_addresses(st["conf"]) == {"mon": {"127.0.0.2"}, "mgr": {"127.0.0.2"}, "osd": {"127.0.0.2"}}
        _round_trip(d)
        # by address instead of interface: the same choice
        assert netif.resolve(address="127.0.0.2") == netif.Binding("127.0.0.2", "127.0.0.0/8", None)
    finally:
        _down_and_check(d, st)


# ---------------------------------------------------------------------- defaults from the site file
@pytest.mark.parametrize("site,args,match", [
    ('[staging]\niface = "hpcs-nope0"\n', [], "stage up: --iface hpcs-nope0: no such network interface"),
    ('[staging]\niface = "10.255.255.254"\n', [], "stage up: --address 10.255.255.254 is not an address of this node"),
    ('[staging]\nram = "100T"\n', ["--osds-per-node", "2"], "2 OSD(s) x --osd-size 50.0 TiB"),
    ('[staging]\nram = "1G"\n', ["--osd-size", "2G"], "--osd-size 2G x 1 OSD(s) per node exceeds the site's "
                                                       "staging RAM budget ("),
])
@need_ceph
def test_stage_up_takes_iface_and_ram_from_the_site_file(site, args, match, tmp_path):
    try:
        from hpcsuite.runtime.site import load_site  # noqa: F401
    except ImportError:
        pytest.skip("hpcsuite.runtime.site (the site file) is not in this tree")
    (tmp_path / "site.toml").write_text(site)
    d = tmp_path / "dep"
    env = dict(os.environ, HPCSUITE_SITE=str(tmp_path / "site.toml"))
    p = subprocess.run([HPCSUITE, "stage", "up", "--backend", "rados", "--dir", d, *args],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = (p.stdout + p.stderr).strip().splitlines()
    assert len(lines) == 1 and match in lines[0], lines
    assert not d.exists()

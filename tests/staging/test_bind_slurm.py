"""``stage up --iface`` and the RAM check across the nodes of a real SLURM job: two nodes emulated
on this machine (``scripts/slurm/start.sh`` with ``HPCSUITE_SLURM_NODES=2``), the check running on
each node through ``srun --overlap`` before anything starts, each node's OSD agent binding to its
own address on the interface. Skipped, with the reason, where SLURM or Ceph is not installed."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

HOST = socket.gethostname().split(".")[0]
NODES = [f"{HOST}-1", f"{HOST}-2"]
missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch", "ceph-mon") if shutil.which(b) is None
           and not Path("/usr/sbin", b).exists()]
pytestmark = [pytest.mark.skipif(bool(missing), reason=f"SLURM or Ceph not installed ({', '.join(missing)} "
                                 "missing): run scripts/setup.sh"), pytest.mark.timeout(420)]

JOB = """#!/bin/bash
#SBATCH --job-name=hpcsuite-bind
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=8
#SBATCH --output={out}
D={dir}
hpcsuite stage up --backend rados --osd-size 40T --dir $D; echo "big rc=$?"
hpcsuite stage up --backend rados --iface hpcs-nope0 --dir $D; echo "nope rc=$?"
ls -d /dev/shm/hpcsuite-ceph-job$SLURM_JOB_ID-* 2>/dev/null; echo "after refusals: $(ls -A $D 2>/dev/null | wc -l) files"
hpcsuite stage up --backend rados --iface lo --osd-size 1G --dir $D -q || exit 1
hpcsuite stage status --dir $D
python - <<'PY'
import json
from hpcsuite.staging import open_store
st = json.load(open("{dir}/state.json"))
print("binding", json.dumps(st["binding"]), "node_addresses", json.dumps(st["node_addresses"], sort_keys=True))
with open_store("{dir}") as s:
    s.put_bytes("x", b"across nodes" * 999)
    print("round trip", s.get_bytes("x") == b"across nodes" * 999)
PY
hpcsuite stage down --dir $D
"""


def _pids_mentioning(text: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if text in ln and not ln.split()[1].startswith("Z") and "ps -eo" not in ln]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm") / "cluster"
    p = subprocess.run([ROOT / "scripts/slurm/start.sh", d], capture_output=True, text=True, timeout=90,
                       env=dict(os.environ, HPCSUITE_SLURM_NODES="2"))
    assert p.returncode == 0, p.stderr
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    yield env
    s = subprocess.run([ROOT / "scripts/slurm/stop.sh", d], capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    assert _pids_mentioning(str(d)) == []


def test_iface_across_two_nodes_and_refusals_checked_on_every_node(cluster, tmp_path):
    out, state = tmp_path / "job.out", tmp_path / "stage"
    script = tmp_path / "bind.sbatch"
    script.write_text(JOB.format(out=out, dir=state))
    p = subprocess.run(["sbatch", "--wait", "--parsable", script], capture_output=True, text=True,
                       env=cluster, cwd=tmp_path, timeout=400)
    log = out.read_text() if out.exists() else ""
    assert p.returncode == 0, (p.stderr, log)
    job = p.stdout.strip().split(";")[0]
    lines = log.splitlines()
    # 40T per node: refused by the check on each node (srun), one line, nothing started
    big = [ln for ln in lines if "40.0 TiB" in ln]
    assert len(big) == 1 and "in /dev/shm on " in big[0] and "(and 1 more node(s)); nothing was started" in big[0], log
    assert "big rc=2" in log and "nope rc=2" in log, log
    nope = [ln for ln in lines if "hpcs-nope0" in ln]
    assert len(nope) == 1 and "no such network interface on " in nope[0] and "lo 127.0.0.1" in nope[0], log
    assert "after refusals: 0 files" in log, log
    # --iface lo: both nodes' OSDs up, each node's address on lo recorded, data through both
    osds = next(ln for ln in lines if ln.startswith("osds"))
    assert "2/2 up" in osds and all(f"{n}: osd." in osds for n in NODES), osds
    binding = next(ln for ln in lines if ln.startswith("binding "))
    assert json.loads(binding.split(" node_addresses ")[0].removeprefix("binding ")) == \
        {"address": "127.0.0.1", "network": "127.0.0.0/8", "iface": "lo"}
    assert json.loads(binding.split(" node_addresses ")[1]) == {n: "127.0.0.1" for n in NODES}, binding
    assert "round trip True" in log and "stage down: stopped" in log, log
    assert not state.exists()
    assert not list(Path("/dev/shm").glob(f"hpcsuite-*-job{job}*"))
    assert _pids_mentioning(f"hpcsuite-ceph-job{job}") == [] and _pids_mentioning(str(state)) == []

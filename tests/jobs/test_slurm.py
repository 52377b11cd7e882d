"""Job scripts on a real single-node SLURM cluster (munge, slurmctld, slurmd) that the tests start
with scripts/slurm/start.sh and stop with scripts/slurm/stop.sh. Skipped, with the reason, only
where the SLURM packages are not installed (scripts/setup.sh installs them)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import HPCSUITE, ROOT

NEEDED = ("slurmctld", "slurmd", "munged", "sbatch")
missing = [b for b in NEEDED if shutil.which(b) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"SLURM not installed ({', '.join(missing)} missing): "
                                                      "run scripts/setup.sh")

SMALL_DECK = """[app]
name = "heat3d"
[grid]
nx = 12
ny = 10
nz = 8
[time]
t_end = 0.001
[output]
file = "{out}"
"""


def _pids_mentioning(path: str) -> list[str]:
    """Live (non-zombie) processes whose command line mentions ``path``."""
    out = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if path in l and not l.split()[1].startswith("Z")
            and "ps -eo" not in l]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm") / "cluster"
    p = subprocess.run([ROOT / "scripts/slurm/start.sh", d], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"), HPCSUITE_HOME=str(ROOT),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("HPCSUITE_TEST_FAILLOG", None)
    yield env, d
    s = subprocess.run([ROOT / "scripts/slurm/stop.sh", d], capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    assert not d.exists()
    assert _pids_mentioning(str(d)) == [], "daemons left behind"


def sh(cmd, env, cwd, timeout=180):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


def test_heat3d_template_runs_on_4_ranks(cluster, tmp_path):
    env, _ = cluster
    deck = tmp_path / "small.toml"
    deck.write_text(SMALL_DECK.format(out=tmp_path / "u.h5"))
    p = sh(["sbatch", "--wait", "--parsable", ROOT / "jobscripts/heat3d.sbatch", deck], env, tmp_path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    job = p.stdout.strip().split(";")[0]
    log = (tmp_path / f"heat3d-{job}.out").read_text()
    # the right --mpi plugin: one job of 4 ranks, not 4 jobs of 1 rank
    assert "on 4 rank(s)" in log and log.count("error at t = 0.001") == 1, log
    assert (tmp_path / "u.h5").is_file()


def test_rendered_script_and_submit_with_dependency(cluster, tmp_path):
    env, _ = cluster
    deck = tmp_path / "small.toml"
    deck.write_text(SMALL_DECK.format(out=""))
    script = tmp_path / "mine.sbatch"
    r = sh([HPCSUITE, "jobscript", "heat3d", "--nodes", "1", "--ntasks-per-node", "3", "--time", "5",
            "--partition", "debug", "--deck", deck, "-o", script], env, tmp_path)
    assert r.returncode == 0, r.stderr
    first = sh([HPCSUITE, "submit", script], env, tmp_path)
    assert first.returncode == 0 and first.stdout.strip().isdigit(), first.stderr
    second = sh([HPCSUITE, "submit", "--after-ok", first.stdout.strip(), "--wait", script], env, tmp_path)
    assert second.returncode == 0, second.stderr
    for jid in (first.stdout.strip(), second.stdout.strip()):
        log = (tmp_path / f"heat3d-{jid}.out").read_text()
        assert "on 3 rank(s)" in log, log


def test_requests_that_cannot_fit_and_bad_scripts_are_refused_before_queueing(cluster, tmp_path):
    env, _ = cluster
    r = sh([HPCSUITE, "jobscript", "heat3d", "--nodes", "2"], env, tmp_path)
    assert r.returncode == 2 and "2 nodes requested but the cluster has 1" in r.stderr
    r = sh([HPCSUITE, "jobscript", "heat3d", "--ntasks-per-node", "8"], env, tmp_path)
    assert r.returncode == 2 and "8 CPUs per node requested but the largest node of the cluster has 4" in r.stderr
    bad = tmp_path / "bad.sbatch"
    bad.write_text("#!/bin/bash\n#SBATCH --ntasks=1\necho hi\n#SBATCH --time=5\n")
    r = sh([HPCSUITE, "submit", bad], env, tmp_path)
    assert r.returncode == 2 and "not queued" in r.stderr and "bad.sbatch:4" in r.stderr
    q = sh(["squeue", "-h"], env, tmp_path)
    assert q.stdout.strip() == ""          # nothing was queued

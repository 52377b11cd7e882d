"""Job scripts on a real single-node SLURM cluster (munge, slurmctld, slurmd) that the tests start
with scripts/slurm/start.sh and stop with scripts/slurm/stop.sh. Skipped, with the reason, only
where the SLURM packages are not installed (scripts/setup.sh installs them)."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import HPCSUITE, ROOT, run_cmd

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
    # the staging epilog, as a site would install it: cleans up after killed jobs
    start_env = dict(os.environ, HPCSUITE_SLURM_EPILOG=str(ROOT / "jobscripts/stage-epilog.sh"))
    p = subprocess.run([ROOT / "scripts/slurm/start.sh", d], capture_output=True, text=True, timeout=60,
                       env=start_env)
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


def _wait_gone(job: str, env, cwd, timeout: float = 240, restarted_log: Path | None = None) -> None:
    """Poll until ``job`` ended. With ``restarted_log``, first until that log shows the job's
    first restart (``restart count 1``, printed by the requeued run itself: a requeue passes
    through CANCELLED with Restarts already raised). The test cluster lets a requeued job start
    again after 10 s (``cred_expire`` in scripts/slurm/start.sh; SLURM's default is 120 s)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        out = sh(["scontrol", "show", "job", "-o", job], env, cwd).stdout
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        state = fields.get("JobState", "")
        waiting_restart = restarted_log is not None and "restart count 1" not in (
            restarted_log.read_text() if restarted_log.exists() else "")
        if state == "FAILED" or not waiting_restart and (not out.strip() or state in (
                "COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")):
            return
        time.sleep(0.5)
    logs = Path(env["SLURM_CONF"]).parent / "log"
    tails = {f.name: f.read_text()[-3000:] for f in sorted(logs.glob("*.log"))} if logs.is_dir() else {}
    raise AssertionError(f"job {job} did not end within {timeout} s; last: {out.strip()}; logs: {tails}")


CKPT_DECK = """[app]
name = "heat3d"
[grid]
nx = 32
ny = 32
nz = 32
[time]
t_end = 0.4
[solver]
depth = 1
[output]
file = "{out}"
checkpoint = "{ckpt}"
check_interval = 5
"""


def test_time_limit_warning_checkpoints_requeues_and_finishes_identically(cluster, tmp_path):
    env, _ = cluster
    env = dict(env, HPCSUITE_PROGRESS_INTERVAL="1")
    deck = tmp_path / "ck.toml"
    deck.write_text(CKPT_DECK.format(out=tmp_path / "u.h5", ckpt=tmp_path / "ck.h5"))
    p = sh(["sbatch", "--parsable", ROOT / "jobscripts/heat3d.sbatch", deck], env, tmp_path)
    job = p.stdout.strip().split(";")[0]
    log = tmp_path / f"heat3d-{job}.out"
    t0 = time.time()
    while "heat3d: step " not in (log.read_text() if log.exists() else ""):
        assert time.time() - t0 < 120, "the job never started stepping"
        time.sleep(0.3)
    # what SLURM sends at --signal=B:USR1@120 before the time limit
    assert sh(["scancel", "--batch", "--signal=USR1", job], env, tmp_path).returncode == 0
    _wait_gone(job, env, tmp_path, restarted_log=log)
    text = log.read_text()
    assert "checkpointed at step" in text and "requeueing job" in text, text
    assert "restart count 1" in text and "continuing from the checkpoint" in text, text
    assert "wrote " in text and not (tmp_path / "ck.h5").exists()
    # the same deck run without interruption gives the identical field
    ref = tmp_path / "ref.toml"
    ref.write_text(CKPT_DECK.format(out=tmp_path / "ref.h5", ckpt=""))
    r = run_cmd([HPCSUITE, "run", "-q", ref], nranks=4, timeout=300)
    assert r.returncode == 0, r.stderr
    import h5py
    import numpy as np
    with h5py.File(tmp_path / "u.h5") as a, h5py.File(tmp_path / "ref.h5") as b:
        assert np.array_equal(a["u"][...], b["u"][...])


TUNE_DECK = """[app]
name = "tune"
[tune]
target = "cholesky"
tolerance = 0.1
[problem]
n = 96
[space]
block = [8, 16, 32, 48]
variant = ["bcast", "ring"]
"""


def test_tuning_sweep_as_job_array_then_collect_after_ok(cluster, tmp_path):
    env, _ = cluster
    deck = tmp_path / "tune.toml"
    deck.write_text(TUNE_DECK)
    out = tmp_path / "sweep"
    script = tmp_path / "tune.sbatch"
    r = sh([HPCSUITE, "jobscript", "tune", "--ntasks-per-node", "2", "--array", "0-1", "--time", "10",
            "--deck", deck, "-o", script], env, tmp_path)
    assert r.returncode == 0, r.stderr
    arr = sh([HPCSUITE, "submit", script, deck, out], env, tmp_path)
    assert arr.returncode == 0, arr.stderr
    col = sh([HPCSUITE, "submit", ROOT / "jobscripts/tune-collect.sbatch", out, "--after-ok",
              arr.stdout.strip(), "--wait"], env, tmp_path)
    assert col.returncode == 0, (col.stderr, [p.read_text() for p in tmp_path.glob("*.out")])
    parts = sorted(out.glob("part-*.json"))
    assert [p.name for p in parts] == ["part-0.json", "part-1.json"]
    import json
    best = json.loads((out / "best.json").read_text())
    assert len(best["results"]) == 8                       # every configuration, split over 2 tasks
    ok = [r for r in best["results"] if r["status"] == "ok"]
    assert best["best_config"] == min(ok, key=lambda r: r["predicted_time"])["config"]
    for a in ("0", "1"):
        log = (tmp_path / f"tune-{arr.stdout.strip()}_{a}.out").read_text()
        assert "on 2 rank(s)" in log, log


def test_eigen_template_runs_on_4_ranks(cluster, tmp_path):
    env, _ = cluster
    p = sh(["sbatch", "--wait", "--parsable", ROOT / "jobscripts/eigen.sbatch",
            ROOT / "inputs/eigen_laplacian.toml"], env, tmp_path)
    assert p.returncode == 0, p.stderr
    log = (tmp_path / f"eigen-{p.stdout.strip().split(';')[0]}.out").read_text()
    assert "on 4 rank(s)" in log and (tmp_path / "out/eigen_laplacian.json").is_file(), log


def test_every_template_names_an_existing_default_deck():
    import re
    for path in sorted((ROOT / "jobscripts").glob("*.sbatch")):
        m = re.search(r"^deck=\$\{1:-([^}]*)\}", path.read_text(), re.M)
        if m:
            assert (ROOT / m.group(1)).is_file(), (path.name, m.group(1))


LES_DECK = """[app]
name = "les"
[case]
kind = "bomex"
[grid]
nx = 12
ny = 12
nz = 32
xsize = 1200.0
ysize = 1200.0
zsize = 3200.0
[subgrid]
scheme = "tke"
[time]
t_end = {t_end}
[output]
dir = "{out}"
stats_every = 60.0
checkpoint = "{ckpt}"
check_interval = 1
"""


def test_les_template_checkpoints_on_the_time_limit_warning_and_continues_identically(cluster, tmp_path):
    env, _ = cluster
    env = dict(env, HPCSUITE_PROGRESS_INTERVAL="1")
    deck = tmp_path / "les.toml"
    deck.write_text(LES_DECK.format(t_end=900.0, out=tmp_path / "o", ckpt=tmp_path / "ck.h5"))
    p = sh(["sbatch", "--parsable", ROOT / "jobscripts/les.sbatch", deck], env, tmp_path)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    log = tmp_path / f"les-{job}.out"
    t0 = time.time()
    while "case bomex" not in (log.read_text() if log.exists() else ""):
        assert time.time() - t0 < 120, "the job never started"
        time.sleep(0.3)
    time.sleep(1.0)
    assert sh(["scancel", "--batch", "--signal=USR1", job], env, tmp_path).returncode == 0
    _wait_gone(job, env, tmp_path, restarted_log=log)
    text = log.read_text()
    assert "on 4 rank(s)" in text and "checkpointed at t = " in text and "requeueing job" in text, text
    assert "restart count 1" in text and "continuing from the checkpoint" in text, text
    assert (tmp_path / "o" / "fields.h5").is_file() and not (tmp_path / "ck.h5").exists(), text
    ref = tmp_path / "ref.toml"
    ref.write_text(LES_DECK.format(t_end=900.0, out=tmp_path / "ref", ckpt=""))
    r = run_cmd([HPCSUITE, "run", "-q", ref], nranks=4, timeout=300)
    assert r.returncode == 0, r.stderr
    import h5py
    import numpy as np
    with h5py.File(tmp_path / "o" / "fields.h5") as a, h5py.File(tmp_path / "ref" / "fields.h5") as b:
        assert set(a) == set(b)
        for k in a:
            assert np.array_equal(a[k][...], b[k][...]), k


TOMO_DECK = """[app]
name = "tomo"
[phantom]
size = {size}
slices = 8
angles = {angles}
[staging]
backend = "rados"
dir = ""
[output]
file = "{out}"
"""
CEPH = shutil.which("ceph-mon") is not None


def _stage_leftovers(job: str) -> list[str]:
    """Processes and /dev/shm folders of the job's staging deployment."""
    tag = f"-job{job}"
    left = [str(p) for p in Path("/dev/shm").glob(f"hpcsuite-*{tag}*")]
    return left + _pids_mentioning(f"hpcsuite-stage-{os.getuid()}{tag}")


@pytest.mark.skipif(not CEPH, reason="Ceph not installed: run scripts/setup.sh")
def test_tomo_template_deploys_ceph_for_the_job_and_tears_it_down(cluster, tmp_path):
    env, _ = cluster
    deck = tmp_path / "tomo.toml"
    deck.write_text(TOMO_DECK.format(size=64, angles=90, out=tmp_path / "tomo.h5"))
    p = sh(["sbatch", "--wait", "--parsable", ROOT / "jobscripts/tomo.sbatch", deck], env, tmp_path, timeout=300)
    job = p.stdout.strip().split(";")[0]
    log = (tmp_path / f"tomo-{job}.out").read_text()
    assert p.returncode == 0, log
    assert "on 4 rank(s)" in log and "HEALTH_OK" in log, log
    assert (tmp_path / "tomo.h5").is_file()
    assert _stage_leftovers(job) == []


@pytest.mark.skipif(not CEPH, reason="Ceph not installed: run scripts/setup.sh")
def test_cancelled_tomo_job_leaves_no_daemon_or_ram_file(cluster, tmp_path):
    env, _ = cluster
    deck = tmp_path / "tomo.toml"
    deck.write_text(TOMO_DECK.format(size=128, angles=720, out=tmp_path / "tomo.h5"))
    p = sh(["sbatch", "--parsable", ROOT / "jobscripts/tomo.sbatch", deck], env, tmp_path)
    job = p.stdout.strip().split(";")[0]
    log = tmp_path / f"tomo-{job}.out"
    t0 = time.time()
    while "tomo: " not in (log.read_text() if log.exists() else ""):
        assert time.time() - t0 < 120, (log.read_text() if log.exists() else "no log")
        time.sleep(0.3)
    assert _stage_leftovers(job) != []          # the deployment is up while the job runs
    assert sh(["scancel", job], env, tmp_path).returncode == 0
    _wait_gone(job, env, tmp_path)
    t0 = time.time()
    while _stage_leftovers(job) and time.time() - t0 < 30:
        time.sleep(0.5)
    assert _stage_leftovers(job) == [], log.read_text()

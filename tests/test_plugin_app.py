"""Applications of another package, registered by entry point (group ``hpcsuite.apps``): the
package ``hpcplug`` in tests/progs/hpcplug_dist (a real distribution: ``hpcplug-0.1.dist-info`` with
its ``entry_points.txt``) on PYTHONPATH, as ``pip install hpcplug`` would put it, gets what the
built-in applications get: listing, a template deck, validation with one-line errors, ``--set``, a
run on several ranks, checkpoint on SIGUSR1 and continuing, and a batch script (its own template,
or hpcsuite's generic one)."""
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import HPCSUITE, ROOT, run_cmd

PLUGIN = ROOT / "tests" / "progs" / "hpcplug_dist"


@pytest.fixture
def env():
    e = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")]))}
    return e


def test_listed_with_a_template_deck_and_validated(env, tmp_path):
    p = run_cmd([HPCSUITE, "run", "--list"], env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    names = [l.split()[0] for l in p.stdout.splitlines()]
    assert {"counter", "plain", "heat3d"} <= set(names), p.stdout
    assert "counter      adds step numbers over all ranks (a plug-in application of the package hpcplug)" in p.stdout
    # without the plug-in on the path it is not there (the listing is not hard-wired)
    assert "counter" not in run_cmd([HPCSUITE, "run", "--list"], cwd=tmp_path).stdout
    t = run_cmd([HPCSUITE, "run", "--template", "counter"], env=env, cwd=tmp_path)
    assert t.returncode == 0 and 'name = "counter"' in t.stdout and "n = 10    # steps" in t.stdout, t.stdout
    deck = tmp_path / "c.toml"
    deck.write_text(t.stdout)                 # the template is itself a valid deck
    c = run_cmd([HPCSUITE, "run", "--check", deck], env=env, cwd=tmp_path)
    assert c.returncode == 0 and c.stdout.strip() == f"{deck}: OK (counter)", (c.stdout, c.stderr)
    bad = run_cmd([HPCSUITE, "run", "--check", deck, "--set", "count.n=-1"], env=env, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert f"{deck}: [count] n must be a positive integer, got -1 (from --set count.n=-1)" in bad.stderr
    slow = run_cmd([HPCSUITE, "run", "--check", deck, "--set", "count.pause=100"], env=env, cwd=tmp_path)
    assert slow.returncode == 2 and "[count] pause = 100.0 makes the run longer than 10 minutes" in slow.stderr
    unknown = run_cmd([HPCSUITE, "run", "--check", deck, "--set", "count.pauze=3"], env=env, cwd=tmp_path)
    assert unknown.returncode == 2 and "[count] unknown key 'pauze'; did you mean 'pause'?" in unknown.stderr


def test_runs_on_two_ranks_with_set(env, tmp_path):
    deck = tmp_path / "c.toml"
    deck.write_text('[app]\nname = "counter"\n[count]\nn = 3\n')
    p = run_cmd([HPCSUITE, "run", deck, "--set", "count.n=6", "--set", f"output.file={tmp_path / 'o.json'}"],
                nranks=2, env=env, cwd=tmp_path, timeout=180)
    assert p.returncode == 0, p.stderr
    # sum over 2 ranks of 1 + 2 + ... + 6
    assert json.loads((tmp_path / "o.json").read_text()) == {"total": 2 * 21, "ranks": 2}
    assert "counter: total 42" in p.stdout and "counting on 2 rank(s)" in p.stdout


def test_checkpoints_on_sigusr1_and_continues(env, tmp_path):
    n = 400
    deck = tmp_path / "c.toml"
    deck.write_text(f'[app]\nname = "counter"\n[count]\nn = {n}\npause = 0.05\n'
                    f'[output]\nfile = "{tmp_path / "o.json"}"\ncheckpoint = "{tmp_path / "ck.json"}"\n')
    proc = subprocess.Popen([HPCSUITE, "run", str(deck)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=dict(os.environ, PYTHONUNBUFFERED="1", **env))
    try:
        t0 = time.time()
        line = proc.stdout.readline()
        while "counting on" not in line:
            assert line and time.time() - t0 < 120, (line, proc.stderr.read() if proc.poll() is not None else "")
            line = proc.stdout.readline()
        time.sleep(0.3)
        proc.send_signal(signal.SIGUSR1)        # what the job script forwards on the time-limit warning
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 85, (out, err)
    step = json.loads((tmp_path / "ck.json").read_text())["step"]
    assert 0 < step < n and f"checkpointed at step {step}" in out
    p = run_cmd([HPCSUITE, "run", deck, "--set", "count.pause=0"], env=env, cwd=tmp_path, timeout=180)
    assert p.returncode == 0, p.stderr
    assert f"continuing from the checkpoint at step {step}" in p.stdout
    assert json.loads((tmp_path / "o.json").read_text())["total"] == n * (n + 1) // 2
    assert not (tmp_path / "ck.json").exists()


def test_batch_scripts_own_and_generic(env, tmp_path):
    lst = run_cmd([HPCSUITE, "jobscript", "--list"], env=env, cwd=tmp_path)
    assert "counter      cpu\n" in lst.stdout and "plain        cpu, gpu (the generic template)" in lst.stdout
    own = tmp_path / "own.sbatch"
    r = run_cmd([HPCSUITE, "jobscript", "counter", "--ntasks-per-node", "2", "--time", "5", "-o", own],
                env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = own.read_text()
    assert "#SBATCH --job-name=counter-own" in text and "# counter (hpcplug): the plug-in's own" in text
    assert "HPCSUITE_SRUN_MPI=" in text and "hpcsuite_step hpcsuite run" in text and "jobscripts/lib.sh\"" not in text
    gen = tmp_path / "gen.sbatch"
    deck = tmp_path / "c.toml"
    deck.write_text('[app]\nname = "plain"\n')
    r = run_cmd([HPCSUITE, "jobscript", "plain", "--nodes", "2", "--deck", deck, "-o", gen], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = gen.read_text()
    assert "#SBATCH --job-name=plain" in text and "#SBATCH --nodes=2" in text and f"deck=${{1:-{deck}}}" in text
    assert "APPLICATION" not in text
    g = run_cmd([HPCSUITE, "jobscript", "plain", "--gpu", "2"], env=env, cwd=tmp_path)
    assert g.returncode == 0 and "#SBATCH --gpus-per-node=2" in g.stdout
    for script in (own, gen):
        c = run_cmd([HPCSUITE, "jobscript", "--check", script], env=env, cwd=tmp_path)
        assert c.returncode == 0 and c.stdout.strip().endswith("0 error(s), 0 warning(s)"), c.stdout

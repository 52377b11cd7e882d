"""Every program in examples/ runs at 2 ranks and passes its own check.

Each example verifies its result against an independent reference (an exact discrete solution,
NumPy or SciPy) and prints ``VERIFIED`` or ``FAILED``; the tests run it under ``mpiexec -n 2`` as
a user would and require exit code 0 and ``VERIFIED``. Examples with a GPU path run once more on
the CuPy stand-in (``tests/fakegpu``). The application of example 7 is registered as an installed
distribution would be (a ``dist-info`` folder with its entry points, written from the example's own
``pyproject.toml``) and driven through the ``hpcsuite`` command: listing, a run, a checkpoint and
the continued run, a job script and its lint.
"""
import ast
import os
import tomllib

import pytest

from helpers import HPCSUITE, ROOT, VENV_BIN, run_cmd

EXAMPLES = ROOT / "examples"
PY = str(VENV_BIN / "python")
FAKEGPU = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests" / "fakegpu"),
                                                       os.environ.get("PYTHONPATH")]))}
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("[0-9][0-9]_*.py"))
GPU = ["01_explicit_pde.py", "02_implicit_heat_cg.py"]        # the examples with a --gpu path
TIMEOUT = 180          # a run takes 2-10 s here (2 cores shared with other jobs); generous


def _verified(p) -> None:
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "VERIFIED" in p.stdout and "FAILED" not in p.stdout, out[-3000:]


def test_every_example_is_short_and_says_what_it_shows_and_how_to_launch_it():
    files = [EXAMPLES / s for s in SCRIPTS] + [EXAMPLES / "07_own_app" / "myapp" / "diffuse1d.py"]
    assert len(files) >= 8
    for f in files:
        doc = ast.get_docstring(ast.parse(f.read_text()))
        assert doc and "Shows:" in doc and "Launch:" in doc, f
        assert len(f.read_text().splitlines()) <= 80, f"{f} is longer than 80 lines"


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "08_checkpoint_restart.py"])
def test_example_runs_at_two_ranks(script, tmp_path):
    args = [PY, EXAMPLES / script] + (["--out", tmp_path] if script in GPU else [])
    _verified(run_cmd(args, nranks=2, cwd=tmp_path, timeout=TIMEOUT))
    if script in GPU:
        assert (tmp_path / ("u.h5" if script.startswith("01") else "heat.h5")).is_file()


@pytest.mark.parametrize("script", GPU)
def test_example_runs_on_the_cupy_stand_in(script, tmp_path):
    _verified(run_cmd([PY, EXAMPLES / script, "--gpu", "--out", tmp_path], nranks=2, cwd=tmp_path,
                      env=FAKEGPU, timeout=TIMEOUT))


def test_checkpoint_on_sigusr1_then_restart_is_bit_identical(tmp_path):
    prog = [PY, EXAMPLES / "08_checkpoint_restart.py", "--dir", tmp_path / "ck"]
    first = run_cmd(prog + ["--signal-at", "7"], nranks=2, cwd=tmp_path, timeout=TIMEOUT)
    assert first.returncode == 85, first.stdout + first.stderr       # EXIT_CHECKPOINTED
    assert "checkpointed at step 8" in first.stdout and "VERIFIED" not in first.stdout
    second = run_cmd(prog, nranks=2, cwd=tmp_path, timeout=TIMEOUT)
    _verified(second)
    assert "restarting at step 8" in second.stdout


@pytest.fixture
def own_app(tmp_path):
    """examples/07_own_app as `pip install` would register it: a dist-info with its entry points."""
    meta = tomllib.loads((EXAMPLES / "07_own_app" / "pyproject.toml").read_text())
    info = tmp_path / "site" / f"{meta['project']['name']}-{meta['project']['version']}.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['project']['name']}\n"
                                         f"Version: {meta['project']['version']}\n")
    eps = meta["project"]["entry-points"]
    info.joinpath("entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items()) for group, items in eps.items()))
    path = [str(EXAMPLES / "07_own_app"), str(tmp_path / "site"), os.environ.get("PYTHONPATH")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, path))}


def test_own_application_registered_by_entry_point(own_app, tmp_path):
    listed = run_cmd([HPCSUITE, "run", "--list"], env=own_app, cwd=tmp_path)
    assert any(line.split()[:1] == ["diffuse1d"] for line in listed.stdout.splitlines()), listed.stdout
    deck = EXAMPLES / "07_own_app" / "diffuse1d.toml"
    bad = run_cmd([HPCSUITE, "run", "--check", deck, "--set", "grid.r=0.7"], env=own_app, cwd=tmp_path)
    assert bad.returncode == 2 and "[grid] r must be" in bad.stderr, bad.stderr
    out = tmp_path / "o"
    run = [HPCSUITE, "run", deck, "--set", f"output.dir={out}"]
    first = run_cmd(run, nranks=2, cwd=tmp_path, timeout=TIMEOUT,
                    env=dict(own_app, HPCSUITE_CHECKPOINT_AT_STEP="100"))   # the SIGUSR1 drill
    assert first.returncode == 85 and "checkpointed at step 100" in first.stdout, first.stdout + first.stderr
    assert (out / "checkpoint.h5").is_file()
    second = run_cmd(run, nranks=2, cwd=tmp_path, timeout=TIMEOUT, env=own_app)
    _verified(second)
    assert "continuing from the checkpoint at step 100" in second.stdout
    assert (out / "u.h5").is_file() and not (out / "checkpoint.h5").exists()
    job = tmp_path / "job.sbatch"
    r = run_cmd([HPCSUITE, "jobscript", "diffuse1d", "--nodes", "1", "--ntasks-per-node", "2",
                 "--time", "00:10:00", "-o", job], env=own_app, cwd=tmp_path)
    assert r.returncode == 0 and job.is_file(), r.stderr
    lint = run_cmd([HPCSUITE, "jobscript", "--check", job], env=own_app, cwd=tmp_path)
    assert lint.returncode == 0 and "0 error(s)" in lint.stdout, lint.stdout + lint.stderr

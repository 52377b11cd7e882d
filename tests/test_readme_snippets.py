"""The README's code blocks, extracted and run (issue 25: "the README's code snippets are run by a test").

Every fenced block of README.md must have an entry in ``BLOCKS`` (keyed by its language and first
line), so a new or changed block fails here until it is classified. An entry either runs the block
and checks its result, or says why the block is not run here. Python blocks are MPI code: they run
under ``mpiexec -n 2`` with a check appended that every rank executes after the snippet. Shell
blocks run command by command; every command line of a run block must be listed with the text its
output must contain, or with the reason it is skipped.
"""
import re
import tomllib
from pathlib import Path

import pytest

from helpers import ROOT, VENV_BIN, run_cmd

README = ROOT / "README.md"
TIMEOUT = 120


def blocks(text: str):
    """(language, first line, body) of every fenced block of the Markdown ``text``."""
    out, lang, body = [], None, []
    for line in text.splitlines():
        m = re.match(r"^```(\S*)\s*$", line)
        if m and lang is None:
            lang, body = m.group(1) or "text", []
        elif line.strip() == "```" and lang is not None:
            out.append((lang, body[0] if body else "", "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


# --- Python blocks: the check appended to each (run on every rank after the snippet) -------------
CHECKS = {
    "from hpcsuite import pgas": """
import h5py, numpy as np
from hpcsuite.runtime import Team
assert row.shape == (100,) and np.all(np.asarray(row) == 2.0), row
assert total == 1000 * 1000 + 1000, total          # a: row 0 = 2, the rest 1
assert np.array_equal(col.to_numpy(), np.full(1000, 2 * 2 + 2 + 999 * (2 * 1 + 1)))   # (a*2 + b) summed
Team.world().barrier()
with h5py.File("out/b.h5", "r") as f:
    got = f["b"][()]
ref = np.ones((1000, 1000)); ref[0] = 2.0
assert np.array_equal(got, ref)
print("CHECKED")
""",
    "from hpcsuite.solvers import DistCSR, lobpcg": """
import numpy as np, scipy.io, scipy.linalg
assert np.all(res.converged)
K = scipy.io.mmread("inputs/eigen_spring16.mtx").toarray()
ref = scipy.linalg.eigh(K, eigvals_only=True)[:6]
assert np.allclose(np.sort(res.eigenvalues), ref, rtol=1e-6), (res.eigenvalues, ref)
print("CHECKED")
""",
    "import numpy as np": """
from mpi4py import MPI
assert info == 0, info
xg = np.concatenate(MPI.COMM_WORLD.allgather(x))                 # the whole solution
r = 1.0 - L.tocsr()[A.row_start:A.row_stop] @ xg                  # this rank's rows, from SciPy's L
rel = np.sqrt(MPI.COMM_WORLD.allreduce(float(r @ r)) / L.shape[0])
assert rel <= 1e-8, rel                                           # cg's rtol on ||b - Ax|| / ||b||
print("CHECKED")
""",
    "from hpcsuite.runtime import Team, Logger, Timers, install_abort_hook": """
assert grid.dims[0] * grid.dims[1] * grid.dims[2] == team.size
print("CHECKED")
""",
}

# --- shell blocks: every command line, with the text its output must contain or why it is skipped --
SKIP = "skip"
USING_IT = {
    "source .venv/bin/activate": (SKIP, "the test puts .venv/bin first on PATH instead"),
    "hpcsuite --help": "exit codes",
    "hpcsuite info": "hpcsuite",
    "hpcsuite run --list": "heat3d",
    "hpcsuite inputs": "heat3d",
    "hpcsuite inputs --copy decks": "copied",
    "hpcsuite run --template heat3d > my.toml": "",
    "hpcsuite run --check my.toml": "my.toml: OK (heat3d)",   # after USER_EDITS
    "mpiexec -n 4 hpcsuite run my.toml": (SKIP, "a full heat3d run on 4 ranks: tests/test_cli.py and the "
                                          "apps' tests run decks"),
    "mpiexec -n 4 hpcsuite run my.toml --set grid.nx=128 --set solver.depth=2":
        (SKIP, "a full heat3d run on 4 ranks (--set is tested in tests/test_cli.py)"),
}
# what the user does between two commands: fill in the template's (required) keys
USER_EDITS = {
    "hpcsuite run --check my.toml": lambda d: (d / "my.toml").write_text(
        re.sub(r"^(nx|ny|nz) = \(required\)", r"\1 = 16", re.sub(
            r"^t_end = \(required\)", "t_end = 0.01", (d / "my.toml").read_text(), flags=re.M), flags=re.M)),
}
JOBSCRIPT = {
    "hpcsuite jobscript heat3d --nodes 2 --ntasks-per-node 16 --time 01:00:00 -o job.sbatch": "wrote job.sbatch",
    "hpcsuite jobscript --check job.sbatch": "job.sbatch: 0 error(s)",
    "hpcsuite submit job.sbatch inputs/heat3d.toml": (SKIP, "needs SLURM (tests/jobs run it on a real SLURM)"),
    "hpcsuite submit job.sbatch inputs/heat3d.toml --set grid.nx=256": (SKIP, "needs SLURM"),
    'jid=$(hpcsuite submit jobscripts/tune.sbatch inputs/tune_cholesky.toml sweep1)': (SKIP, "needs SLURM"),
    'hpcsuite submit jobscripts/tune-collect.sbatch sweep1 --after-ok "$jid"': (SKIP, "needs SLURM"),
}

BLOCKS = {
    ("sh", "./scripts/run_main.sh      # set-up, then the main job: mpiexec -n 4 hpcsuite run inputs/heat3d.toml"):
        (SKIP, "the set-up and the main job / whole suite: what CI itself runs"),
    ("sh", "# module load python/3.11 mpich/4.0 hdf5/1.10-mpich    # on a cluster (names: module avail)"):
        (SKIP, "the user install: scripts/check_user_install.sh runs it verbatim in CI (minutes)"),
    ("toml", "[modules]"): "site-file",
    ("sh", "cd ~/hpcsuite && . venv/bin/activate"):
        (SKIP, "the worked example: scripts/check_user_install.sh runs it in the user's install"),
    ("sh", "source .venv/bin/activate"): USING_IT,
    ("python", "from hpcsuite import pgas"): "python",
    ("python", "from hpcsuite.solvers import DistCSR, lobpcg"): "python",
    ("python", "import numpy as np"): "python",
    ("sh", "mpiexec -n 2 hpcsuite tune inputs/tune_cholesky.toml --compare-full   # table + JSON report + plot"):
        (SKIP, "minutes of autotuning; tests/tune run the tune app on small decks"),
    ("sh", "hpcsuite jobscript heat3d --nodes 2 --ntasks-per-node 16 --time 01:00:00 -o job.sbatch"): JOBSCRIPT,
    ("sh", "hpcsuite stage up --backend rados --osd-size 1G --dir /dev/shm/st    # ~11 s on 2 cores"):
        (SKIP, "deploys Ceph (needs the Ceph lock; tests/staging cover these commands)"),
    ("sh", "mpiexec -n 2 hpcsuite run inputs/bomex_small.toml     # 1 simulated hour, clouds form (seconds)"):
        (SKIP, "LES runs and sbatch: tests/les run BOMEX, SLURM tests run the templates"),
    ("python", "from hpcsuite.runtime import Team, Logger, Timers, install_abort_hook"): "python",
    ("text", "scripts/     setup.sh (idempotent), run_main.sh, run_tests.sh"): (SKIP, "the layout, not code"),
}

ALL = blocks(README.read_text())


def _id(b):
    return f"{b[0]}:{b[1][:40]}"


def test_every_readme_block_is_classified():
    unknown = [(lang, first) for lang, first, _ in ALL if (lang, first) not in BLOCKS]
    assert not unknown, f"README blocks without an entry in BLOCKS (run or skip with reason): {unknown}"
    assert len(ALL) == len(BLOCKS), "a README block listed in BLOCKS is gone or duplicated"


def _commands(body):
    return [re.split(r"\s+#\s", line)[0].strip() for line in body.splitlines() if line.strip()]


@pytest.mark.parametrize("block", ALL, ids=[_id(b) for b in ALL])
def test_readme_block(block, tmp_path):
    lang, first, body = block
    how = BLOCKS[(lang, first)]
    if isinstance(how, tuple):
        pytest.skip(how[1])
    if how == "site-file":
        site = tomllib.loads(body)                       # the example site file is valid TOML ...
        from hpcsuite.runtime.site import load_site      # ... and a valid site file
        (tmp_path / "site.toml").write_text(body)
        s = load_site(tmp_path / "site.toml")
        assert site["slurm"]["partition"] == "compute" and s is not None
        return
    if how == "python":
        prog = tmp_path / "snippet.py"
        # a failed check on one rank ends both (install_abort_hook), instead of a hang in a collective
        prog.write_text("from hpcsuite.runtime import install_abort_hook\ninstall_abort_hook()\n"
                        + body + "\n" + CHECKS[first].strip() + "\n")
        # cwd: the repository root when the snippet reads a checkout file, else a scratch folder
        cwd = ROOT if "inputs/" in body else tmp_path
        p = run_cmd([VENV_BIN / "python", prog], nranks=2, cwd=cwd, timeout=TIMEOUT)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert p.stdout.count("CHECKED") == 2, p.stdout       # both ranks passed the check
        return
    table = how
    cmds = _commands(body)
    assert sorted(cmds) == sorted(table), "the block's commands differ from the test's table"
    env = {"PATH": f"{VENV_BIN}:{__import__('os').environ['PATH']}"}
    for cmd in cmds:
        expect = table[cmd]
        if isinstance(expect, tuple):
            continue                                     # skipped with the reason in the table
        if cmd in USER_EDITS:
            USER_EDITS[cmd](tmp_path)
        p = run_cmd(["bash", "-c", cmd], cwd=tmp_path, env=env, timeout=TIMEOUT)
        assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
        assert expect in p.stdout, f"{cmd}: {expect!r} not in\n{p.stdout[-2000:]}"

"""Helpers shared by the tests (importable as ``helpers``; conftest files are not modules to import)."""
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MPIEXEC = str(VENV_BIN / "mpiexec") if (VENV_BIN / "mpiexec").exists() else "mpiexec.mpich"
HPCSUITE = str(VENV_BIN / "hpcsuite")


def run_cmd(args, nranks: int | None = None, timeout: float = 120, cwd=None, env=None):
    """Run a command (under ``mpiexec -n nranks`` when given); return the CompletedProcess.

    Records the wall time as ``.seconds``. Never run this from inside an MPI test.
    """
    cmd = ([MPIEXEC, "-n", str(nranks)] if nranks else []) + [str(a) for a in args]
    e = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    e.pop("HPCSUITE_TEST_FAILLOG", None)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=e)
    p.seconds = time.perf_counter() - t0
    return p

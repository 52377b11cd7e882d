"""Helpers shared by the tests (importable as ``helpers``; conftest files are not modules to import)."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def _program(name: str, *fallbacks: str) -> str:
    # the venv's own first (scripts/setup.sh installs there); else the PATH's, as on a machine whose
    # Python is not ours (bench/gpu_check.sh on a lent GPU machine puts its MPICH and launcher there)
    if (VENV_BIN / name).exists():
        return str(VENV_BIN / name)
    for n in (*fallbacks, name):
        if shutil.which(n):
            return shutil.which(n)
    return str(VENV_BIN / name)


def _vendor_launchers() -> tuple[str, ...]:
    # the launcher of the MPI that this venv's mpi4py was built against, by its explicit name
    # (Debian installs both under the alternatives' plain "mpiexec", which may be the other one)
    if (VENV_BIN / "mpiexec").exists():
        return ()
    from hpcsuite.runtime.launcher import mpi_vendor
    return {"openmpi": ("mpiexec.openmpi",), "mpich": ("mpiexec.mpich", "mpiexec.hydra")}.get(mpi_vendor(), ())


MPIEXEC = _program("mpiexec", *_vendor_launchers())
HPCSUITE = _program("hpcsuite")


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

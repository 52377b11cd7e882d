"""Shared test set-up.

MPI tests (``@pytest.mark.mpi``) run under ``mpiexec -n N python -m pytest --with-mpi`` (see
``scripts/run_tests.sh``). A failure on one rank while the others wait in a collective would hang
the job, so a failing MPI test prints its report and aborts the whole job at once; the failing test's
id is appended to ``$HPCSUITE_TEST_FAILLOG`` for the summary.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from helpers import run_cmd


def pytest_configure(config):
    """Under mpiexec, one BLAS/numba thread per core share: 4 ranks with 2 threads each on 2 cores
    turn every BLAS call into a fight for the cores."""
    if config.getoption("--with-mpi", default=False):
        from hpcsuite.runtime import Team
        from hpcsuite.runtime.threads import fit_threads
        fit_threads(Team.world())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or not item.config.getoption("--with-mpi", default=False):
        return
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    log = os.environ.get("HPCSUITE_TEST_FAILLOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{item.nodeid}[rank {rank}]\n")
    sys.stderr.write(f"\n[rank {rank} of {size}] FAILED {item.nodeid} ({rep.when})\n{rep.longreprtext}\n")
    sys.stderr.flush()
    if size > 1:
        time.sleep(0.3)      # let mpiexec forward this report before the job is torn down
        comm.Abort(1)


@pytest.fixture
def team():
    """The world team (inside an MPI test: all ranks of the mpiexec run)."""
    from hpcsuite.runtime import Team
    return Team.world()


@pytest.fixture
def shared_tmp(tmp_path, team):
    """A temporary folder that every rank of an MPI test sees (rank 0's ``tmp_path``)."""
    return Path(team.bcast(str(tmp_path)))


@pytest.fixture
def run():
    return run_cmd


def _current_file():
    log = os.environ.get("HPCSUITE_TEST_FAILLOG")
    if not log:
        return None
    from hpcsuite.runtime.launcher import env_rank   # any launcher's rank variable, MPI not started
    return f"{log}.running-rank{env_rank()}"


def pytest_runtest_logstart(nodeid, location):
    """Note which test each rank is in, so a timeout or a crash can be attributed to a test."""
    path = _current_file()
    if path:
        with open(path, "w") as f:
            f.write(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    path = _current_file()
    if path and os.path.exists(path):
        os.remove(path)

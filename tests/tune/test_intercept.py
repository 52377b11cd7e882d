"""A plain mpi4py code tuned through ``tune.intercept``: same results, communication seen as
kernels with the path, skipped in selective runs, predictions equal on every rank."""
import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.tune import Execution, InterceptedComm, Model, intercept
from plain_jacobi import jacobi


@pytest.mark.mpi
def test_plain_mpi4py_jacobi_runs_unchanged_and_is_seen(team):
    ref = jacobi(MPI.COMM_WORLD, 64, 20)
    comm = intercept(MPI.COMM_WORLD)
    assert np.array_equal(jacobi(comm, 64, 20), ref)          # outside an execution: the same
    # a loose interval (the mechanics are tested): an 8-byte Allreduce takes microseconds, and on
    # the shared machine its times spread over more than an order of magnitude (measured)
    model = Model(tolerance=0.95, confidence=0.5, min_samples=2)
    with Execution(model, "profile") as prof:
        got = jacobi(comm, 64, 20)
    assert np.array_equal(got, ref) and prof.result.numerically_valid
    counts = prof.result.counts
    assert counts["Allreduce"] == [20, 0]
    if team.size > 1:
        assert counts["Sendrecv"] == [40, 0]
    with Execution(model, "selective") as sel:
        jacobi(comm, 64, 20)
    executed, skipped = sel.result.counts["Allreduce"]
    assert executed + skipped == 20 and skipped > 0            # steady collectives skipped
    assert team.allgather(sel.result.predicted) == [sel.result.predicted] * team.size
    assert team.allgather(sel.result.counts["Allreduce"]) == [sel.result.counts["Allreduce"]] * team.size


@pytest.mark.mpi
def test_derived_communicators_are_intercepted_too(team):
    comm = intercept(MPI.COMM_WORLD)
    dup = comm.Dup()
    half = comm.Split(team.rank % 2, team.rank)
    assert isinstance(dup, InterceptedComm) and isinstance(half, InterceptedComm)
    buf = np.ones(3)
    with Execution(Model(), "profile") as ex:
        half.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        req = dup.Iallreduce(MPI.IN_PLACE, np.ones(2), op=MPI.SUM)
        req.Wait()
        total = dup.allreduce(1)
    assert total == team.size and buf[0] == len(range(team.rank % 2, team.size, 2))
    assert {"Allreduce", "Iallreduce", "allreduce"} <= set(ex.result.counts)
    for c in (dup, half):
        c.Free()
    with pytest.raises(TypeError, match="mpi4py communicator"):
        intercept("COMM_WORLD")

"""A plain mpi4py code tuned with no change to its body: inside ``tune.intercept_world()`` and
``tune.blas()`` the SUMMA of ``examples/10_tune_plain_mpi4py.py`` (mpi4py + NumPy only, reading
``MPI.COMM_WORLD`` and splitting it) gives the same bits as a plain run and NumPy's product,
its broadcasts and products are kernels (counted here from the loop's structure), skipped once
steady with predictions equal on every rank; the world communicator is restored, derived
communicators are intercepted, and a ``Team`` over an intercepted communicator counts once
(1-4 ranks)."""
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.runtime import Team
from hpcsuite.tune import Execution, InterceptedComm, Model, blas, intercept_world
from hpcsuite.tune.targets import load_program

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "10_tune_plain_mpi4py.py"
summa, inputs = load_program(EXAMPLE, "summa", "inputs")
LOOSE = dict(tolerance=0.95, confidence=0.5, min_samples=2)   # the mechanics, not the noise
PANEL = 8


def _case(size):
    n, grid = 24 * size, (1, size)           # column blocks of 24: panels of 8 fit every rank count
    return dict(n=n, panel=PANEL, grid=grid), inputs(n, grid)


def _numpy_block(n, rank, size):
    """This rank's block of A B from the closed forms, all in NumPy (no MPI)."""
    i, k = np.arange(n), np.arange(n)
    j = np.arange(rank * n // size, (rank + 1) * n // size)
    return np.cos(i[:, None] + 2.0 * k) @ np.sin(2.0 * k[:, None] - j)


@pytest.mark.mpi
def test_plain_summa_intercepted_gives_the_plain_bits_and_its_kernels_are_seen(team):
    cfg, blocks = _case(team.size)
    plain = summa(**cfg, **blocks)
    assert np.allclose(plain, _numpy_block(cfg["n"], team.rank, team.size), rtol=0, atol=1e-9)
    model = Model(**LOOSE)
    with intercept_world(), blas():
        assert isinstance(MPI.COMM_WORLD, InterceptedComm) and isinstance(MPI.COMM_WORLD, MPI.Intracomm)
        with Execution(model, "profile") as prof:
            seen = summa(**cfg, **blocks)
    assert type(MPI.COMM_WORLD) is MPI.Intracomm                 # restored
    assert np.array_equal(seen, plain) and prof.result.numerically_valid
    panels = cfg["n"] // PANEL
    assert prof.result.counts == {"Bcast": [2 * panels, 0], "numpy.dot": [panels, 0]}
    assert team.allgather(prof.result.predicted) == [prof.result.predicted] * team.size
    with intercept_world(), blas():
        for _ in range(2):
            with Execution(model, "profile"):
                summa(**cfg, **blocks)
        with Execution(model, "selective") as sel:
            got = summa(**cfg, **blocks)
    assert sel.result.skipped > 0 and sel.result.counts["numpy.dot"][1] > 0, sel.result.counts
    assert sum(sel.result.counts["Bcast"]) == 2 * panels and got.shape == plain.shape
    assert team.allgather(sel.result.predicted) == [sel.result.predicted] * team.size
    assert team.allgather(sel.result.counts["Bcast"]) == [sel.result.counts["Bcast"]] * team.size


@pytest.mark.mpi
def test_world_context_restores_nests_and_intercepts_what_derives_from_it(team):
    world = MPI.COMM_WORLD
    with pytest.raises(RuntimeError, match="inside"):
        with intercept_world():
            raise RuntimeError("inside")
    assert MPI.COMM_WORLD is world
    with intercept_world() as outer:
        with intercept_world() as inner:
            assert inner is outer is MPI.COMM_WORLD
        assert MPI.COMM_WORLD is outer
        cart = MPI.COMM_WORLD.Create_cart([team.size], periods=[True])
        half = MPI.COMM_WORLD.Split(team.rank % 2, team.rank)
        dup = half.Dup()
        assert isinstance(cart, MPI.Cartcomm) and all(isinstance(c, InterceptedComm) for c in (cart, half, dup))
        assert cart.Shift(0, 1) == ((team.rank - 1) % team.size, (team.rank + 1) % team.size)
        over = Team(MPI.COMM_WORLD)                  # a Team over an intercepted communicator
        buf = np.ones(2)
        with Execution(Model(), "profile") as ex:
            over.Allreduce(MPI.IN_PLACE, buf)
            dup.Allreduce(MPI.IN_PLACE, buf[:1])
        for c in (cart, half, dup):
            c.Free()
    assert MPI.COMM_WORLD is world
    assert ex.result.counts == {"Allreduce": [2, 0]}                # once each, not twice
    assert buf[0] == team.size * len(range(team.rank % 2, team.size, 2)) and buf[1] == team.size


def test_the_world_team_made_first_inside_intercept_world_keeps_the_plain_communicator(monkeypatch):
    """``Team.world()`` keeps the first team it makes: made first inside ``intercept_world()`` it
    used to keep the intercepted communicator after the context exited."""
    import hpcsuite.runtime.team as team_module
    monkeypatch.setattr(team_module, "_WORLD", None)
    with intercept_world() as seen:
        assert isinstance(MPI.COMM_WORLD, InterceptedComm) and MPI.COMM_WORLD is seen
        inside = Team.world()
    assert Team.world() is inside and not isinstance(inside.comm, InterceptedComm)
    assert inside.comm is MPI.COMM_WORLD


def test_statistics_channels_are_per_communicator_not_per_handle():
    """The record of what was sent on a communicator is kept under a number of its own: a freed
    communicator's handle, reused by the next one, gets a new number (and so starts with nothing
    sent), a ``Dup`` its own, and the same communicator (or an intercepted one on its handle)
    keeps its number."""
    from hpcsuite.tune import intercept
    from hpcsuite.tune.execution import channel_id
    a = MPI.COMM_SELF.Dup()
    ida, handle = channel_id(a), a.py2f()
    assert channel_id(a) == ida and channel_id(intercept(a)) == ida
    d = a.Dup()
    assert channel_id(d) != ida
    a.Free()
    b = MPI.COMM_SELF.Dup()
    try:
        assert channel_id(b) not in (ida, channel_id(d))
        if b.py2f() != handle:
            pytest.skip("this MPI did not reuse the freed handle (the case the number is for)")
    finally:
        b.Free()
        d.Free()

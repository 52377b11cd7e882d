"""Kernel statistics along the execution path: the parallel merge against NumPy, and a kernel
measured on one rank becoming skippable on the others after their first exchange (collectives,
point-to-point, 1-4 ranks)."""
import time

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.runtime import compute
from hpcsuite.tune import Execution, Model, merge_moments
from hpcsuite.tune.stats import _unmerge

T = 0.003             # seconds per "work" kernel (sleep: frees the core)
STEPS = 6
KEY = ("comp", "work", (1,))


def _moments(x):
    x = np.asarray(x, float)
    return (x.size, float(x.mean()), float(((x - x.mean()) ** 2).sum()))


@pytest.mark.parametrize("split", [1, 7, 50, 99])
def test_parallel_merge_matches_numpy_on_the_union(split):
    x = np.random.default_rng(split).lognormal(-6, 0.5, size=100)
    n, mean, m2 = merge_moments(_moments(x[:split]), _moments(x[split:]))
    assert n == 100 and mean == pytest.approx(x.mean(), rel=1e-13)
    assert m2 / (n - 1) == pytest.approx(x.var(ddof=1), rel=1e-11)
    back = _unmerge((n, mean, m2), _moments(x[:split]))       # the inverse gives the other part
    assert back[0] == 100 - split and back[1] == pytest.approx(x[split:].mean(), rel=1e-10)
    assert back[2] == pytest.approx(_moments(x[split:])[2], rel=1e-7, abs=1e-18)
    assert merge_moments((0, 0.0, 0.0), (3, 2.0, 1.0)) == (3, 2.0, 1.0)


def test_snapshots_replace_older_ones_and_count_once():
    m = Model(tolerance=0.2, confidence=0.9, min_samples=3)
    m.origin = 0
    assert m.learn(1, KEY, 2, 1.0, 0.0)
    assert not m.learn(1, KEY, 2, 5.0, 0.0)              # not newer: ignored
    assert m.learn(1, KEY, 4, 1.0, 0.0)                  # newer: replaces, not added
    assert not m.learn(0, KEY, 9, 1.0, 0.0)              # my own samples never come back
    assert m.merged(KEY).n == 4 and m.steady(KEY) and m.mean(KEY) == 1.0
    m.record(KEY, 3.0)                                   # own and merged differ: own not steady yet
    merged = m.merged(KEY)
    assert merged.n == 5 and merged.mean == pytest.approx(np.mean([1, 1, 1, 1, 3]))
    # a rank whose own statistics are steady charges its own mean (a kernel may take another
    # time on another rank), else the merged one
    for _ in range(3):
        m.record(KEY, 3.0)
    assert m.mean(KEY) == pytest.approx(3.0)
    m.rescale(0.5)
    assert m.kernels[KEY].mean == pytest.approx(1.5) and m.remote[KEY][1][1] == pytest.approx(0.5)


def _rank0_knows(team, share_model):
    """A model where only rank 0 has samples of the work kernel (8 exact ones)."""
    if team.rank == 0:
        share_model.origin = MPI.COMM_WORLD.Get_rank()
        for _ in range(8):
            share_model.record(KEY, T)
    return share_model


@pytest.mark.mpi
@pytest.mark.parametrize("share", [True, False])
def test_kernel_sampled_on_rank0_is_skipped_elsewhere_after_the_first_collective(team, share):
    """Rank 0 alone has measured ``work``. Every other rank runs it once, then the first Allreduce
    brings rank 0's statistics along the path and the merged interval is tight: skipped from then
    on. Without sharing the other ranks run it until their own samples are steady."""
    if team.size == 1:
        pytest.skip("needs a second rank to learn from rank 0")
    # loose interval (0.6 at 90 %): one sample of a 3 ms sleep may take several ms on a loaded
    # machine, and the merge of 8 exact samples with it must still be steady
    model = _rank0_knows(team, Model(tolerance=0.6, confidence=0.9, min_samples=4))
    buf = np.zeros(8)
    with Execution(model, "selective", share=share) as ex:
        for _ in range(STEPS):
            compute("work", (1,), time.sleep, T)
            team.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    work = ex.result.counts["work"]
    if team.rank == 0:
        assert work == [0, STEPS]
    elif share:
        assert work == [1, STEPS - 1], work          # skipped right after the first exchange
        assert model.remote[KEY][0][0] == 8
    else:
        assert work[0] >= model.min_samples, work
    # predictions equal across ranks
    assert team.allgather(ex.result.predicted) == [ex.result.predicted] * team.size


@pytest.mark.mpi
def test_statistics_travel_along_a_ring_of_sendrecv(team):
    """Point-to-point: the statistics follow the path message. Rank r learns rank 0's samples in
    the r-th Sendrecv of a ring (from r - 1, who learned them one step earlier), so rank r runs
    ``work`` r times and skips it from then on."""
    if team.size == 1:
        pytest.skip("needs a ring of at least two ranks")
    model = _rank0_knows(team, Model(tolerance=0.6, confidence=0.9, min_samples=STEPS))
    grid = team.grid(1, periods=True)
    src, dst = grid.shift(0, 1)
    out, inn = np.zeros(4), np.zeros(4)
    with Execution(model, "selective") as ex:
        for _ in range(STEPS):
            compute("work", (1,), time.sleep, T)
            grid.Sendrecv(out, dst, inn, src)
    executed = ex.result.counts["work"][0]
    assert executed == min(team.rank, STEPS), (team.rank, ex.result.counts)
    assert team.allgather(ex.result.predicted) == [ex.result.predicted] * team.size
    grid.free()


@pytest.mark.mpi
def test_statistics_cross_sub_communicators(team):
    """Rows, then columns of a process grid: rank 0's samples reach its row in the first row
    collective and every rank after the column collective that follows."""
    if team.size < 4:
        pytest.skip("needs a 2 x 2 grid")
    grid = team.grid((2, 2))
    row, col = grid.sub([False, True]), grid.sub([True, False])
    model = _rank0_knows(team, Model(tolerance=0.6, confidence=0.9, min_samples=STEPS))
    buf = np.zeros(4)
    with Execution(model, "selective") as ex:
        compute("work", (1,), time.sleep, T)
        row.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        col.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        for _ in range(STEPS - 1):
            compute("work", (1,), time.sleep, T)
    assert ex.result.counts["work"] == ([0, STEPS] if team.rank == 0 else [1, STEPS - 1])
    for t in (row, col, grid):
        t.free()

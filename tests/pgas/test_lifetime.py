"""Deferred, agreed frees (``pgas.lifetime``): ``__del__`` never communicates; results the cyclic
garbage collector finds on some ranks only do not desynchronise the ranks (no hang, no mismatched
collectives, the same pools everywhere) and are released once every rank has dropped them; dropped
results are released at the team's next collective point."""
import gc

import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import lifetime, memory
from hpcsuite.runtime.comm_hooks import intercept

from numpy_layouts import B, C, N, Comms, data, dist_array

pytestmark = pytest.mark.mpi


class Cycle:
    """An object in a reference cycle: only the cyclic collector frees what it holds."""

    def __init__(self, x):
        self.me, self.x = self, x


def same_everywhere(team, *values):
    got = team.allgather(tuple(values))
    assert len(set(got)) == 1, got


def test_dropped_results_wait_for_a_collective_point(team):
    ref = data((17, 3), np.float64, 40)
    a = dist_array(ref, (ref.shape, (C, N), None))
    pgas.collect(team)
    live = pgas.live_segments()
    r = np.exp(a)
    del r
    assert lifetime.pending(team) == 1          # queued by __del__, not freed there
    assert pgas.live_segments() == live + 1
    s = a + 1                                   # the next creation releases it (into the pool)
    assert lifetime.pending(team) == 0
    assert pgas.live_segments() == live + 1
    del s
    pgas.collect(team)
    assert pgas.live_segments() == live
    a.free()


def test_collector_on_some_ranks_only_does_not_desynchronise(team, monkeypatch):
    """Results held only by reference cycles, collected by ``gc.collect()`` on rank 0 alone: the
    ranks keep computing (same-pattern chains, redistributed operands, reductions, new windows:
    pool hits and misses) with equal results and equal pools, no segment is freed inside the
    collector, and once every rank has collected them the memory is released."""
    if team.size == 3:
        pytest.skip("one collecting rank against one (2 ranks) and against three (4 ranks) covers it; "
                    "3 oversubscribed ranks only add CI time")
    freed_in_gc = []
    real_free = memory.Segment.free
    monkeypatch.setattr(memory.Segment, "free",
                        lambda self: (freed_in_gc.append(lifetime._in_gc), real_free(self))[1])
    ra, rb = data((23, 6), np.float64, 41), data((23, 6), np.float32, 42)
    a = dist_array(ra, (ra.shape, (B, N), None))
    b = dist_array(rb, (rb.shape, (C, N), None))
    pgas.collect(team)
    live0 = pgas.live_segments()
    was = gc.isenabled()
    gc.disable()                      # only the explicit gc.collect() below finds the cycles
    try:
        for k in range(3):
            Cycle(a * (k + 1))
            Cycle(np.sqrt(abs(a - b)))
        lifetime.drain(team)                  # (the temporaries the chains dropped)
        comms = Comms()
        with intercept(comms):
            if team.rank == 0:
                gc.collect()
        assert comms.calls == []              # __del__ under the collector: no communication
        assert not any(freed_in_gc)
        same_everywhere(team, pgas.live_segments())
        if team.rank == 0:
            assert lifetime.pending(team) == 6
        monkeypatch.setattr(lifetime, "AGREE_EVERY", 2)      # (agreement points come sooner)
        for k in range(5):
            # new shapes: new windows (agreement points), and pooled reuse of same-layout ones
            rk = data((5 + k, 4), np.float64, 50 + k)
            x = dist_array(rk, (rk.shape, (B, N), None))
            y = x * 2 + 1
            np.testing.assert_allclose(y.sum(axis=0).to_numpy(), (rk * 2 + 1).sum(axis=0), rtol=1e-12)
            np.testing.assert_allclose((a + b).to_numpy(), ra + rb, rtol=1e-6)
            del y
            x.free()
            same_everywhere(team, pgas.live_segments(), memory.pooled_segments(),
                            len(memory._pool))
        if team.size > 1:                     # not agreed yet: still queued on rank 0
            assert lifetime.pending(team) == (6 if team.rank == 0 else 0)
        gc.collect()                          # now every rank has found them
        pgas.collect(team)
        assert lifetime.pending(team) == 0
        assert pgas.live_segments() == live0
        same_everywhere(team, pgas.live_segments(), memory.pooled_segments())
    finally:
        if was:
            gc.enable()
    assert freed_in_gc and not any(freed_in_gc)   # segments were freed, none inside the collector
    a.free()
    b.free()


def test_agreement_releases_only_what_every_rank_dropped(team):
    """The agreed release frees the sequence numbers queued on every rank, in increasing order,
    and keeps the others queued."""
    ref = data((12,), np.float64, 43)
    a = dist_array(ref, ((12,), (B,), None))
    pgas.collect(team)
    live = pgas.live_segments()
    was = gc.isenabled()
    gc.disable()
    try:
        first, second = Cycle(a + 1), Cycle(a + 2)
        del first
        if team.rank == 0:
            gc.collect()                      # rank 0 finds the first cycle only
        del second
        gc.collect()                          # every rank: the second (and the first elsewhere)
        assert lifetime.pending(team) == 2
        pgas.collect(team)
        assert lifetime.pending(team) == 0
        assert pgas.live_segments() == live
    finally:
        if was:
            gc.enable()
    a.free()


def test_kept_local_view_of_a_dropped_result_stays_private(team, monkeypatch):
    """A view kept of a dropped result's block (the block itself, a slice of it) stays valid and
    private: the result's segment is parked, not pooled, while the view lives (before, the next
    result of the same layout reused that memory and the view changed under its holder); once the
    views go, the segment returns to the pool and temporaries are reused again (no new windows)."""
    ref = data((24, 5), np.float64, 44)
    a = dist_array(ref, ((24, 5), (B, N), None))
    pgas.collect(team)
    for _ in range(2):                          # warm the pool with this layout
        r = a * 2
        del r
    pgas.collect(team)
    r = a * 2
    whole, part = r.local, r.local[1:]
    want = whole.copy()
    del r
    others = [a * 3, a * 5, a + 7]              # each would have reused r's segment
    pgas.collect(team)
    np.testing.assert_array_equal(whole, want)  # unchanged by the new results
    np.testing.assert_array_equal(part, want[1:])
    for o in others:
        assert not np.shares_memory(o.local, whole)
    assert lifetime.parked(team) == 1
    del whole, part, others
    pgas.collect(team)                          # no view left: released into the pool
    assert lifetime.parked(team) == 0
    live, made = pgas.live_segments(), []
    init = memory.Segment.__init__

    def counted(self, *args, **kw):
        made.append(1)
        init(self, *args, **kw)
    monkeypatch.setattr(memory.Segment, "__init__", counted)
    for _ in range(4):
        t = np.sqrt(abs(a * 2 + a)) - 1
        del t
    pgas.collect(team)
    monkeypatch.undo()
    assert not made                             # the temporaries came from the pool
    assert pgas.live_segments() == live
    same_everywhere(team, pgas.live_segments(), memory.pooled_segments(), lifetime.parked(team))
    a.free()

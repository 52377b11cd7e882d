"""Atomics on DistArray elements and the team mutex: contention from every rank, several
distributions, the shared-memory and the RMA configurations, integer and float elements."""
import time

import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE

# (dist, grid, shape) for the contention tests
LAYOUTS = [
    ((BLOCKED,), None, (11,)),
    ((CYCLIC,), None, (11,)),
    ((BLOCKCYCLIC(2), BLOCKCYCLIC(3)), (0, 0), (5, 7)),
]
# every layout through shared memory and through RMA; the dtypes alternate so that both meet both
CASES = [(lay, shm, dt) for i, lay in enumerate(LAYOUTS) for shm, dt in
         (((True, False)[i % 2], np.int64), ((False, True)[i % 2], np.float64))]


def case_id(c):
    (dist, _, _), shm, dt = c
    return f"{'-'.join(map(repr, dist))}-{'shm' if shm else 'rma'}-{np.dtype(dt).name}"


def spread_indices(a, k=3):
    """A few global indices owned by different units: the first, the last, and one of the last unit."""
    last_unit = a.team.size - 1
    owned = a.pattern.owned_indices(last_unit)
    idx = [(0,) * a.ndim, tuple(n - 1 for n in a.shape)]
    if all(o.size for o in owned):
        idx.append(tuple(int(o[0]) for o in owned))
    return list(dict.fromkeys(idx))[:k]


@pytest.mark.mpi
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_atomics_under_contention(team, case):
    (dist, grid, shape), shm, dt = case
    a = pgas.zeros(shape, dtype=dt, dist=dist, grid=grid, shm=shm)
    size, k = team.size, 8
    # fetch_add: every increment sees a distinct old value, and none is lost
    for gi in spread_indices(a):
        c = pgas.Atomic(a, gi)
        olds = [c.fetch_add(1) for _ in range(k)]
        assert all(isinstance(x, np.dtype(dt).type) for x in olds)
        seen = sorted(float(x) for r in team.allgather(olds) for x in r)
        assert seen == list(range(k * size)), gi
        team.barrier()
        assert c.load() == k * size
        a.sync()
        assert a[gi] == k * size
    # compare_and_swap: exactly one rank swaps -1 for its rank; the others see the winner
    target = pgas.Atomic(a, tuple(n - 1 for n in shape))
    if team.rank == 0:
        target.store(-1)
    team.barrier()
    old = target.compare_and_swap(-1, team.rank)
    olds = team.allgather(float(old))
    winners = [r for r, o in enumerate(olds) if o == -1]
    assert len(winners) == 1
    assert all(o == winners[0] for r, o in enumerate(olds) if r != winners[0])
    team.barrier()
    assert target.load() == winners[0]
    # a failing compare_and_swap leaves the element alone
    assert target.compare_and_swap(-5, 99) == winners[0] and target.load() == winners[0]
    team.barrier()
    # load / store / exchange round trip: each rank writes its own element, everyone reads all
    mine = [i for i in np.ndindex(shape) if np.ravel_multi_index(i, shape) % size == team.rank][:3]
    for j, gi in enumerate(mine):
        pgas.Atomic(a, gi).store(100 * team.rank + j)
    team.barrier()
    for r in range(size):
        theirs = [i for i in np.ndindex(shape) if np.ravel_multi_index(i, shape) % size == r][:3]
        for j, gi in enumerate(theirs):
            assert pgas.Atomic(a, gi).load() == 100 * r + j
    team.barrier()
    if mine:
        e = pgas.Atomic(a, mine[0])
        assert e.exchange(7) == 100 * team.rank and e.load() == 7
    a.sync()
    if mine:
        assert a[mine[0]] == 7
    a.free()


@pytest.mark.mpi
def test_float_fetch_add_is_exact_for_representable_sums(team):
    a = pgas.zeros(3, dtype=np.float64)
    c = pgas.Atomic(a, -1)
    assert c.index == (2,)
    for _ in range(4):
        c.fetch_add(0.25)
    team.barrier()
    assert c.load() == 0.25 * 4 * team.size
    a.free()


# layouts whose element addressing is easy to get wrong: halos, tiles, a NONE dimension
ADDRESSING = [
    dict(shape=(6, 5), dist=(BLOCKED, BLOCKED), grid=(0, 0), halo=1),
    dict(shape=(4, 6), dist=(pgas.TILE(2), pgas.TILE(3)), grid=(0, 0)),
    dict(shape=(7, 3), dist=(CYCLIC, NONE), grid=None),
    dict(shape=(3, 2, 5), dist=(BLOCKED, NONE, BLOCKCYCLIC(2)), grid=(0, 1, 0)),
]


@pytest.mark.mpi
@pytest.mark.parametrize("lay", ADDRESSING, ids=["halo", "tile", "cyclic-none", "3d"])
def test_atomic_addresses_every_element(team, lay):
    a = pgas.zeros(lay["shape"], dtype=np.int32, dist=lay["dist"], grid=lay["grid"],
                   halo=lay.get("halo", 0), shm=False)
    shape = lay["shape"]
    flat = np.arange(np.prod(shape)).reshape(shape)
    for gi in np.ndindex(shape):
        if flat[gi] % team.size == team.rank:
            pgas.Atomic(a, gi).store(int(flat[gi]) + 1)
    a.sync()
    assert np.array_equal(a.to_numpy(), flat + 1)
    if any(a.halo_width):                       # the halo cells were never touched
        padded = a.local_with_halo.copy()
        padded[tuple(slice(w, n - w) for w, n in zip(a.halo_width, padded.shape))] = 0
        assert not padded.any()
    rng = np.random.default_rng(team.rank)
    for _ in range(5):
        gi = tuple(int(rng.integers(n)) for n in shape)
        assert pgas.Atomic(a, gi).load() == flat[gi] + 1
    team.barrier()
    a.free()


@pytest.mark.mpi
def test_atomic_argument_errors(team):
    a = pgas.zeros((5, 7), dtype=np.int64, dist=(BLOCKED, BLOCKED), grid=(0, 0))
    if team.rank == 0:       # index errors are local: the other ranks do not take part
        with pytest.raises(IndexError, match=r"\(5, 0\).*global shape \(5, 7\)"):
            pgas.Atomic(a, (5, 0))
        with pytest.raises(IndexError, match=r"global shape \(5, 7\)"):
            pgas.Atomic(a, 3)
        for bad in ((1, slice(None)), (True, 0), (1.0, 2)):
            with pytest.raises(IndexError, match="integer"):
                pgas.Atomic(a, bad)
    team.barrier()
    c = pgas.Atomic(a, (-1, -1))
    assert c.index == (4, 6)
    with pytest.raises(ValueError, match="integer"):
        c.fetch_add(1.5)
    with pytest.raises(ValueError):
        c.store([1, 2])
    with pytest.raises(ValueError, match="DistArray"):
        pgas.Atomic(np.zeros(3), 0)
    for dt in (np.bool_, np.complex128):
        b = pgas.zeros(4, dtype=dt)
        with pytest.raises(ValueError, match="dtype"):
            pgas.Atomic(b, 0)
        b.free()
    a.free()
    with pytest.raises(RuntimeError, match="freed"):
        c.load()
    with pytest.raises(RuntimeError, match="freed"):
        pgas.Atomic(a, 0)


# ---------------------------------------------------------------------- Mutex
@pytest.mark.mpi
@pytest.mark.parametrize("shm", [True, False], ids=["shm", "rma"])
def test_mutex_protects_read_modify_write(team, shm):
    before = pgas.live_mutexes()
    n = 2 * team.size
    a = pgas.zeros(n, dtype=np.int64, shm=shm)
    inside = pgas.Atomic(pgas.zeros(1, dtype=np.int64), 0)
    m = pgas.Mutex()
    assert pgas.live_mutexes() == before + 1
    k = 10
    for _ in range(k):
        with m:
            assert m.held
            assert inside.fetch_add(1) == 0          # nobody else is in here
            v = a[n - 1]                             # plain get, then plain put: not atomic;
            time.sleep(1e-3)                         # without the lock, updates get lost
            a[n - 1] = v + 1
            inside.fetch_add(-1)
        assert not m.held
    a.sync()
    assert a[n - 1] == k * team.size
    m.free()
    inside.array.free()
    a.free()
    assert pgas.live_mutexes() == before


@pytest.mark.mpi
def test_mutex_try_lock(team):
    m = pgas.Mutex()
    if team.rank == 0:
        assert m.try_lock() and m.held
        assert not m.try_lock()            # not recursive: a second try fails, the lock stays held
        assert m.held
    team.barrier()
    if team.rank != 0:
        assert not m.try_lock() and not m.held
    team.barrier()
    if team.rank == 0:
        m.unlock()
    team.barrier()
    for r in range(team.size):             # free again: each rank in turn gets it at once
        if team.rank == r:
            assert m.try_lock()
            m.unlock()
        team.barrier()
    m.free()


@pytest.mark.mpi
def test_mutex_is_fifo(team):
    m = pgas.Mutex()
    order = pgas.Atomic(pgas.zeros(1, dtype=np.int64), 0)
    if team.rank == 0:
        m.lock()
    team.barrier()
    # rank r queues only once r tickets were drawn, so tickets (and service) follow rank order
    deadline = time.monotonic() + 60
    want = team.rank if team.rank else team.size
    while team.rank and m._peek()[0] != want:
        assert time.monotonic() < deadline
        time.sleep(1e-3)
    if team.rank:
        m.lock()
    else:
        while m._peek()[0] != want:
            assert time.monotonic() < deadline
            time.sleep(1e-3)
    assert order.fetch_add(1) == team.rank
    m.unlock()
    team.barrier()
    assert m._peek() == (team.size, team.size)
    team.barrier()
    m.free()
    order.array.free()


@pytest.mark.mpi
def test_mutex_errors_and_free(team):
    before = pgas.live_mutexes()
    m = pgas.Mutex(team)
    with pytest.raises(RuntimeError, match="does not hold"):
        m.unlock()
    m.lock()
    with pytest.raises(RuntimeError, match="already holds"):
        m.lock()
    m.unlock()
    with pytest.raises(KeyError):           # the context manager releases on an exception
        with m:
            raise KeyError("boom")
    assert not m.held
    team.barrier()
    m.free()
    m.free()                                # idempotent
    assert pgas.live_mutexes() == before
    for call in (m.lock, m.unlock, m.try_lock, m.__enter__):
        with pytest.raises(RuntimeError, match="freed"):
            call()
    with pytest.raises(ValueError, match="Team"):
        pgas.Mutex(team.comm)
    assert "freed" in repr(m)


@pytest.mark.mpi
def test_mutex_on_sub_teams(team):
    color = team.rank % 2
    sub = team.split(color)
    a = pgas.zeros(2, dtype=np.int64)
    m = pgas.Mutex(sub)                      # one lock per half: the halves do not exclude each other
    k = 8
    for _ in range(k):
        with m:
            a[color] = a[color] + 1
    a.sync()
    counts = np.bincount([r % 2 for r in range(team.size)], minlength=2)
    assert np.array_equal(a[:], k * counts)
    m.free()
    sub.free()
    a.free()


@pytest.mark.mpi
@pytest.mark.parametrize("dist,shape", [((pgas.BLOCKED,), (101,)), ((pgas.CYCLIC,), (101,)),
                                        ((pgas.BLOCKCYCLIC(3), pgas.BLOCKED), (13, 8))])
def test_batched_accumulate_loses_no_update(team, dist, shape):
    """Every rank adds 1 at random indices (with repeats) concurrently; the table ends equal to
    the count of all ranks' indices (each rank regenerates everybody's indices from the seeds)."""
    a = pgas.zeros(shape, dtype=np.int64, dist=dist, grid=(0,) * len(shape), halo=0)
    n = int(np.prod(shape))
    def draws(r):
        return np.random.default_rng(1000 + r).integers(0, n, size=300)
    for _ in range(3):
        flat = draws(team.rank)
        idx = flat if len(shape) == 1 else np.stack(np.unravel_index(flat, shape), axis=1)
        pgas.accumulate(a, idx, 1)
    a.sync()
    expected = 3 * sum(np.bincount(draws(r), minlength=n) for r in range(team.size)).reshape(shape)
    assert np.array_equal(a.to_numpy(), expected)
    # max and replace
    b = pgas.full(shape, -1.0, dist=dist, grid=(0,) * len(shape))
    flat = draws(team.rank)
    idx = flat if len(shape) == 1 else np.stack(np.unravel_index(flat, shape), axis=1)
    pgas.accumulate(b, idx, float(team.rank), op="max")
    b.sync()
    ref = np.full(n, -1.0)
    for r in range(team.size):
        np.maximum.at(ref, draws(r), float(r))
    assert np.array_equal(b.to_numpy(), ref.reshape(shape))
    with pytest.raises(ValueError, match="op must be one of"):
        pgas.accumulate(b, idx, 1.0, op="xor")
    with pytest.raises(IndexError, match="out of bounds for global shape"):
        pgas.accumulate(b, np.full((1, len(shape)), 10**6) if len(shape) > 1 else [10**6], 1.0)
    a.free()
    b.free()

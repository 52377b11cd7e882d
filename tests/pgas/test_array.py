"""DistArray global and local views against NumPy, for every distribution, 1-D to 3-D, uneven
extents, through shared memory and through MPI RMA."""
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKED, CYCLIC, NONE

from reference import all_dists, random_index, shape_for

CASES = [(d, shm) for nd in (1, 2, 3) for d in all_dists(nd, tile_ok=True) for shm in (True, False)]


def ids(case):
    d, shm = case
    return f"{'-'.join(map(repr, d))}-{'shm' if shm else 'rma'}"


def grid_for(dist):
    return tuple(0 if s.kind != "none" else 1 for s in dist)


@pytest.mark.mpi
@pytest.mark.parametrize("case", CASES, ids=[ids(c) for c in CASES])
def test_get_put_local_against_numpy(team, case):
    dist, shm = case
    shape = shape_for(dist)
    ref = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 0.5
    if all(s.kind == "none" for s in dist) and team.size > 1:
        with pytest.raises(ValueError, match="every dimension is NONE"):
            pgas.from_numpy(ref, dist=dist, root=None)
        return
    a = pgas.from_numpy(ref if team.rank == 0 else None, dist=dist, grid=grid_for(dist), shm=shm)
    assert a.shape == shape
    # local view: the owned elements at their global indices
    g = np.broadcast_arrays(*a.local_global_indices())
    assert a.local.shape == a.pattern.storage_shape(team.rank)
    assert np.array_equal(a.local, ref[tuple(g)]) if a.local.size else True
    assert np.array_equal(a.to_numpy(), ref)
    whole = a.to_numpy(root=team.size - 1)
    assert (whole is None) == (team.rank != team.size - 1)
    # random reads from every rank (each rank its own selections)
    rng = np.random.default_rng(100 + team.rank)
    for _ in range(12):
        idx = random_index(rng, shape)
        got = a[idx]
        assert np.array_equal(got, ref[idx]), idx
        h = a.get_async(idx)
        assert np.array_equal(h.wait(), ref[idx]), idx
    team.barrier()
    # writes: in turn, one rank writes a random selection; every rank tracks the reference
    for turn in range(2 * team.size):
        r = np.random.default_rng(7 * turn)
        idx = random_index(r, shape)
        val = r.standard_normal(np.shape(ref[idx]))
        ref[idx] = val
        if turn % team.size == team.rank:
            if turn % 2:
                a[idx] = val
            else:
                a.put_async(idx, val).wait()
        a.sync()
    assert np.array_equal(a.to_numpy(), ref)
    # local writes are seen globally after sync
    a.local[...] = -1.0
    a.sync()
    assert np.all(a[...] == -1.0)
    a.free()


@pytest.mark.mpi
def test_scalar_access_and_broadcasting(team):
    a = pgas.zeros((6, 4), dist=(CYCLIC, NONE))
    if team.rank == 0:
        a[5, 3] = 7.0
        a[0] = np.arange(4.0)          # broadcast a row
        a[1:3, :] = 2.0                # broadcast a scalar
    a.sync()
    assert a[5, 3] == 7.0 and isinstance(a[5, 3], np.floating)
    assert np.array_equal(a[0], np.arange(4.0)) and np.all(a[1:3] == 2.0)
    assert a[-1, -1] == 7.0
    with pytest.raises(ValueError, match="cannot assign"):
        a[0:2, 0:2] = np.ones(3)
    a.free()


@pytest.mark.mpi
def test_bad_indices_raise_index_error_naming_shape(team):
    a = pgas.zeros((37, 5))
    with pytest.raises(IndexError, match=r"index 37 is out of bounds for dimension 0 of global shape \(37, 5\)"):
        a[37, 0]
    with pytest.raises(IndexError, match="index -6 is out of bounds for dimension 1"):
        a[0, -6] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="not an integer or a slice"):
        a[[1, 2]]
    a.free()


@pytest.mark.mpi
def test_construction_errors_are_value_errors_on_every_rank(team):
    with pytest.raises(ValueError, match="block size"):
        pgas.zeros(10, dist=pgas.BLOCKCYCLIC(0))
    with pytest.raises(ValueError, match="cannot hold"):
        pgas.zeros((4, 4), dist=(BLOCKED, BLOCKED), grid=(team.size + 1, 1))
    with pytest.raises(ValueError, match="no MPI equivalent"):
        pgas.zeros(4, dtype=object)
    with pytest.raises(ValueError, match="halos need BLOCKED"):
        pgas.zeros(10, dist=CYCLIC, halo=1)
    with pytest.raises(ValueError, match="halo width 3 along dimension 0 exceeds the smallest local extent 2"):
        pgas.zeros(2 * team.size, halo=3)
    team.barrier()


@pytest.mark.mpi
def test_free_is_collective_leaks_nothing_and_blocks_reuse(team):
    before = pgas.live_segments()
    arrays = [pgas.zeros((9, 4), dist=d) for d in [(BLOCKED, NONE), (CYCLIC, NONE), (BLOCKED, NONE)]]
    arrays.append(pgas.zeros(12, halo=1, boundary="periodic"))
    arrays[-1].halo.update()
    assert pgas.live_segments() == before + 4
    for a in arrays:
        a.free()
        a.free()                      # idempotent
    assert pgas.live_segments() == before
    with pytest.raises(RuntimeError, match="freed"):
        arrays[0][0, 0]
    with pytest.raises(RuntimeError, match="freed"):
        arrays[0].local
    with pgas.zeros(5):
        assert pgas.live_segments() == before + 1
    assert pgas.live_segments() == before


@pytest.mark.mpi
def test_arange_full_and_dtypes(team):
    a = pgas.arange(3, 40, 2)
    assert np.array_equal(a.to_numpy(), np.arange(3, 40, 2))
    b = pgas.full((5, 3), 2.5, dist=CYCLIC)
    assert np.array_equal(b.to_numpy(), np.full((5, 3), 2.5))
    c = pgas.ones(7, dtype=np.int32)
    assert c.to_numpy().dtype == np.int32 and c.to_numpy().sum() == 7
    d = pgas.from_numpy(np.arange(10, dtype=np.complex128) * 1j, root=None)
    assert d[3] == 3j
    for x in (a, b, c, d):
        x.free()


@pytest.mark.mpi
def test_sub_team_arrays(team):
    sub = team.split(team.rank % 2)
    a = pgas.arange(11, team=sub)
    assert a.team.size == sub.size
    assert np.array_equal(a[::-1], np.arange(11)[::-1])
    node = team.split_by_node()
    b = pgas.arange(6, team=node, dist=CYCLIC)
    assert np.array_equal(b.to_numpy(), np.arange(6))
    a.free()
    b.free()

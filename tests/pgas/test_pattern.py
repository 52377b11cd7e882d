"""Patterns against enumeration-built references (property-based), their errors, and their cost
at 100,000 units."""
import itertools
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcsuite.pgas import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE, TILE, Pattern

from reference import owner_table

specs = st.one_of(st.just(BLOCKED), st.just(CYCLIC), st.just(NONE),
                  st.integers(1, 9).map(BLOCKCYCLIC))


@st.composite
def patterns(draw):
    nd = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 23)) for _ in range(nd))
    dist = tuple(draw(specs) for _ in range(nd))
    distributed = [d for d in range(nd) if dist[d].kind != "none"]
    units = draw(st.integers(1, 7)) if distributed else 1
    return shape, dist, units


@settings(max_examples=300, deadline=None)
@given(patterns())
def test_pattern_matches_enumeration(args):
    shape, dist, units = args
    p = Pattern(shape, dist, team=units)
    assert np.prod(p.grid) == units
    tables = [owner_table(s, n, g) for s, n, g in zip(dist, shape, p.grid)]
    counts = {}
    for g in itertools.product(*(range(n) for n in shape)):
        coords = tuple(int(t[0][i]) for t, i in zip(tables, g))
        lidx = tuple(int(t[1][i]) for t, i in zip(tables, g))
        unit = int(np.ravel_multi_index(coords, p.grid))
        assert p.unit_at(g) == unit
        assert p.local_index(g) == (unit, lidx)
        assert p.global_index(unit, lidx) == g
        counts[unit] = counts.get(unit, 0) + 1
    for u in range(units):
        assert p.local_size(u) == counts.get(u, 0)
        owned = p.owned_indices(u)
        coords = p.unit_coords(u)
        for d, (o, t) in enumerate(zip(owned, tables)):
            assert np.array_equal(o, np.flatnonzero(t[0] == coords[d]))
        # blocks cover exactly the owned set
        blocks = list(p.owned_blocks(u))
        covered = sum(int(np.prod([s.stop - s.start for s in b])) for b in blocks)
        assert covered == p.local_size(u)


@pytest.mark.parametrize("tile,n,units", [((4,), (36,), 3), ((4, 5), (36, 10), 4), ((2, 5, 3), (8, 5, 3), 2)])
def test_tile_storage_round_trip(tile, n, units):
    p = Pattern(n, tuple(TILE(t) for t in tile), team=units)
    for u in range(units):
        ls = p.local_shape(u)
        block = np.arange(int(np.prod(ls))).reshape(ls)
        st_ = p.local_to_storage(block)
        assert st_.shape == p.storage_shape(u)
        assert np.array_equal(p.storage_to_local(np.ascontiguousarray(st_)), block)
        # each tile is contiguous in storage and holds a tile-shaped piece of the local block
        for lidx in itertools.product(*(range(x) for x in ls)):
            assert st_[p.storage_index(lidx)] == block[lidx]
        gi = p.local_global_indices(u)
        g = np.broadcast_arrays(*gi)
        for pos in itertools.product(*(range(x) for x in st_.shape)):
            gidx = tuple(int(a[pos]) for a in g)
            unit, lidx = p.local_index(gidx)
            assert unit == u and p.storage_index(lidx) == pos


def test_bad_patterns_raise_value_error():
    with pytest.raises(ValueError, match="block size must be a positive integer"):
        BLOCKCYCLIC(0)
    with pytest.raises(ValueError, match="block size"):
        TILE(-2)
    with pytest.raises(ValueError, match="NONE but the process grid has 2"):
        Pattern((4, 4), (BLOCKED, NONE), team=4, grid=(2, 2))
    with pytest.raises(ValueError, match="cannot hold 4 units"):
        Pattern((4, 4), (BLOCKED, BLOCKED), team=4, grid=(3, 0))
    with pytest.raises(ValueError, match="multiple of 4"):
        Pattern((37,), TILE(4), team=2)
    with pytest.raises(ValueError, match="cannot be mixed"):
        Pattern((8, 8), (TILE(4), BLOCKED), team=2)
    with pytest.raises(ValueError, match="shape"):
        Pattern((-1, 3), BLOCKED, team=2)
    with pytest.raises(ValueError, match="dist has 1 entries"):
        Pattern((4, 4), (BLOCKED,), team=2)
    with pytest.raises(ValueError, match="every dimension is NONE"):
        Pattern((4,), NONE, team=2)
    with pytest.raises(ValueError, match="distribution must be"):
        Pattern((4,), "diagonal", team=2)


def test_out_of_range_indices_name_index_and_shape():
    p = Pattern((37, 5), (BLOCKCYCLIC(4), NONE), team=3)
    with pytest.raises(IndexError, match=r"index \(37, 0\) is out of bounds for global shape \(37, 5\)"):
        p.unit_at((37, 0))
    with pytest.raises(IndexError, match="unit 3 is outside"):
        p.local_shape(3)
    with pytest.raises(IndexError, match="local index"):
        p.global_index(0, (13, 0))


def _queries(p, rng, k=2000):
    gs = rng.integers(0, p.shape[0], size=k)
    for g in gs:
        u, l = p.local_index((int(g),))
        assert p.global_index(u, l) == (int(g),)


@pytest.mark.parametrize("spec", [BLOCKED, CYCLIC, BLOCKCYCLIC(7)])
def test_cost_does_not_grow_with_units(spec):
    """A pattern over 100,000 units answers the same queries as one over 4 with the same
    (constant) memory: no per-unit tables. Correctness is checked against the enumeration."""
    n = 10**6 + 7
    rng = np.random.default_rng(0)
    peaks = {}
    for units in (4, 100_000):
        tracemalloc.start()
        p = Pattern(n, spec, team=units)
        _queries(p, np.random.default_rng(1))
        peaks[units] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        owner, local = owner_table(spec, n, units)
        for g in rng.integers(0, n, size=200):
            assert p.local_index((int(g),)) == (int(owner[g]), (int(local[g]),))
    assert peaks[100_000] < 2 * peaks[4] + 64 * 1024, peaks

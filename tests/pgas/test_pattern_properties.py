"""Patterns: the parts of the interface test_pattern.py's enumeration does not reach -- argument
forms and their errors, equality, the grid choice, unit numbering, extents and storage order --
each checked against an independent reference (row-major numbering as numpy.ravel_multi_index,
owners and local indices enumerated per dimension, NumPy reshapes of a hand-made tile layout)
(issue 21 item 5: tests that catch mutated pattern code)."""
import itertools

import numpy as np
import pytest

from hpcsuite.pgas import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE, TILE, Pattern
from hpcsuite.runtime import Team

from reference import owner_table


def owners(p):
    """unit of every global index (enumeration reference), as an array of the global shape."""
    tables = [owner_table(s, n, g)[0] for s, n, g in zip(p.dist, p.shape, p.grid)]
    coords = np.meshgrid(*tables, indexing="ij")
    return np.ravel_multi_index(coords, p.grid) if p.size else np.zeros(p.shape, int)


# ---------------------------------------------------------------- argument forms
def test_shape_forms():
    assert Pattern(7, team=2).shape == (7,) and Pattern(np.int64(7), team=2).shape == (7,)
    assert Pattern([3, np.int32(4)], team=2).shape == (3, 4)
    assert Pattern((0, 5), team=2).shape == (0, 5) and Pattern((0, 5), team=2).size == 0
    assert Pattern((3, 4, 5), team=2).size == 60 and Pattern((3, 4, 5), team=2).ndim == 3
    for bad, msg in [(True, "shape must be a non-negative integer or a tuple of them, got True"),
                     (2.0, "shape must be a non-negative integer or a tuple of them, got 2.0"),
                     ((2, 1.5), "shape must be a non-negative integer or a tuple of them, got (2, 1.5)"),
                     ((), "shape must be a non-empty tuple of non-negative integers, got ()"),
                     (-1, "shape must be a non-empty tuple of non-negative integers, got (-1,)"),
                     ((4, -2), "shape must be a non-empty tuple of non-negative integers, got (4, -2)")]:
        with pytest.raises(ValueError) as e:
            Pattern(bad, team=2)
        assert str(e.value) == msg, bad


def test_one_spec_distributes_the_first_dimension_only():
    for spec in (BLOCKED, CYCLIC, "cyclic", "blocked", BLOCKCYCLIC(2)):
        p = Pattern((6, 4, 3), spec, team=2)
        assert p.dist[1:] == (NONE, NONE) and len(p.dist) == 3 and p.grid == (2, 1, 1)
    assert Pattern((6, 4), ("none", "cyclic"), team=2).dist == (NONE, CYCLIC)
    with pytest.raises(ValueError) as e:
        Pattern((4, 4), (BLOCKED, BLOCKED, BLOCKED), team=2)
    assert str(e.value) == "dist has 3 entries for a 2-D shape"


@pytest.mark.parametrize("bad", [0, -2, True, 2.5, "4"])
def test_team_must_be_a_team_or_a_positive_count(bad):
    with pytest.raises(ValueError) as e:
        Pattern(8, team=bad)
    assert str(e.value) == f"team must be a Team or a positive number of units, got {bad!r}"


def test_a_team_and_the_world_default():
    world = Team.world()
    for p in (Pattern(8, team=world), Pattern(8)):
        assert p.team is not None and p.team.size == world.size and p.nunits == world.size
    p = Pattern(8, team=np.int64(3))
    assert p.team is None and p.nunits == 3 and type(p.nunits) is int
    assert Pattern(8, team=1).grid == (1,)


# ---------------------------------------------------------------- the process grid
def test_default_grid_spreads_units_over_the_distributed_dimensions():
    assert Pattern((8, 8, 8), (BLOCKED, NONE, CYCLIC), team=6).grid == (3, 1, 2)
    assert Pattern((8, 8), (NONE, BLOCKED), team=4).grid == (1, 4)
    assert Pattern((8, 8), (BLOCKED, BLOCKED), team=4).grid == (2, 2)
    assert Pattern((8, 8), (NONE, NONE), team=1).grid == (1, 1)
    with pytest.raises(ValueError) as e:
        Pattern((8, 8), (NONE, NONE), team=3)
    assert str(e.value) == ("every dimension is NONE, so the array cannot be spread over 3 units; "
                            "distribute at least one dimension")


def test_given_grids():
    assert Pattern((8, 8), (BLOCKED, BLOCKED), team=6, grid=(3, 2)).grid == (3, 2)
    assert Pattern((8, 8), (BLOCKED, BLOCKED), team=6, grid=(0, 3)).grid == (2, 3)
    assert Pattern((8, 8), (BLOCKED, BLOCKED), team=6, grid=[1, 0]).grid == (1, 6)
    assert Pattern((8, 8), (BLOCKED, NONE), team=4, grid=(0, 0)).grid == (4, 1)    # 0 on NONE means 1
    assert Pattern((8, 8), (NONE, CYCLIC), team=4, grid=(1, 4)).grid == (1, 4)
    for grid, msg in [((4,), "grid has 1 extents for a 2-D shape"),
                      ((2, 2, 1), "grid has 3 extents for a 2-D shape"),
                      ((1, 2), "dimension 1 is NONE but the process grid has 2 units along it"),
                      ((3, 1), "a process grid 3x1 cannot hold 4 units"),
                      ((3, 0), "a process grid 3x1 cannot hold 4 units")]:
        with pytest.raises(ValueError) as e:
            Pattern((8, 8), (BLOCKED, NONE), team=4, grid=grid)
        assert str(e.value) == msg, grid
    with pytest.raises(ValueError) as e:
        Pattern((8, 8), (BLOCKED, BLOCKED), team=4, grid=(3, 0))
    assert str(e.value) == "a process grid 3x? cannot hold 4 units"


def test_a_process_grid_object_gives_its_extents():
    world = Team.world()
    pg = world.grid((world.size, 1))
    p = Pattern((8, 8), (BLOCKED, BLOCKED), team=world, grid=pg)
    assert p.grid == (world.size, 1)


@pytest.mark.mpi
def test_a_process_grid_object_sets_the_grid_at_every_rank_count(team):
    """Collective (the grid's communicator): a 1 x size grid, not the default size x 1."""
    pg = team.grid((1, team.size))
    p = Pattern((8, 8), (BLOCKED, BLOCKED), team=team, grid=pg)
    assert p.grid == (1, team.size)
    assert p == Pattern((8, 8), (BLOCKED, BLOCKED), team=team.size, grid=(1, team.size))


# ---------------------------------------------------------------- units and elements
@pytest.mark.parametrize("shape,dist,units,grid", [
    ((7, 5, 3), (BLOCKED, CYCLIC, BLOCKCYCLIC(2)), 12, (3, 2, 2)),
    ((9, 4), (CYCLIC, BLOCKED), 6, (2, 3)),
    ((5,), (BLOCKED,), 7, None),
])
def test_units_are_numbered_row_major(shape, dist, units, grid):
    p = Pattern(shape, dist, team=units, grid=grid)
    for u in range(units):
        c = p.unit_coords(u)
        assert c == tuple(int(x) for x in np.unravel_index(u, p.grid))
        assert p.unit_of(c) == u
    for bad in (-1, units):
        with pytest.raises(IndexError) as e:
            p.unit_coords(bad)
        assert str(e.value) == f"unit {bad} is outside a pattern over {units} units"


@pytest.mark.parametrize("shape,dist,units", [
    ((7, 5, 3), (BLOCKED, CYCLIC, BLOCKCYCLIC(2)), 12),
    ((9, 4), (CYCLIC, BLOCKED), 6),
    ((13,), (BLOCKCYCLIC(3),), 4),
    ((2, 9), (BLOCKED, BLOCKED), 6),        # more units along dimension 0 than elements
])
def test_owners_extents_and_global_indices_against_the_enumeration(shape, dist, units):
    p = Pattern(shape, dist, team=units)
    own = owners(p)
    counts = np.bincount(own.ravel(), minlength=units)
    for g in itertools.product(*map(range, shape)):
        u = int(own[g])
        assert p.unit_at(g) == u and p.is_local(g, u) and not p.is_local(g, (u + 1) % units)
    for u in range(units):
        assert p.local_size(u) == counts[u]
        ls = p.local_shape(u)
        assert int(np.prod(ls)) == counts[u]
        # every local element's global index, by broadcasting, is owned by u, in increasing order
        gi = np.broadcast_arrays(*p.local_global_indices(u))
        assert gi[0].shape == ls
        if counts[u]:
            assert np.all(own[tuple(gi)] == u)
            assert len(set(zip(*(a.ravel() for a in gi)))) == counts[u]
            for d in range(len(shape)):
                assert np.all(np.diff(gi[d], axis=d) > 0)
        # the blocks cover exactly what u owns, without overlap
        mask = np.zeros(shape, int)
        for blk in p.owned_blocks(u):
            assert all(s.stop > s.start for s in blk)
            mask[blk] += 1
        assert np.array_equal(mask, (own == u).astype(int))
    assert p.max_local_shape() == tuple(max(p.local_shape(u)[d] for u in range(units)) for d in range(len(shape)))


def test_scalar_and_numpy_indices_and_their_errors():
    p = Pattern(10, CYCLIC, team=3)
    assert p.unit_at(4) == p.unit_at(np.int64(4)) == p.unit_at((4,)) == 1
    assert p.local_index(np.int32(5)) == (2, (1,))
    assert p.global_index(2, 1) == (5,) and p.global_index(np.int64(2), np.int64(1)) == (5,)
    for bad in (10, -1):
        with pytest.raises(IndexError) as e:
            p.unit_at(bad)
        assert str(e.value) == f"index {bad} is out of bounds for global shape (10,)"
    q = Pattern((4, 6), (BLOCKED, BLOCKED), team=4)
    for bad in ((4,), (1, 2, 3), (4, 0), (0, 6), (-1, 0)):
        with pytest.raises(IndexError) as e:
            q.local_index(bad)
        shown = bad if len(bad) > 1 else bad[0]
        assert str(e.value) == f"index {shown} is out of bounds for global shape (4, 6)", bad
    with pytest.raises(IndexError) as e:
        q.global_index(3, (2, 0))
    assert str(e.value) == "local index (2, 0) is out of bounds for unit 3's local shape (2, 3)"
    for bad in ((0,), (0, 3), (0, -1)):
        with pytest.raises(IndexError, match="out of bounds for unit 0's local shape"):
            q.global_index(0, bad)
    with pytest.raises(IndexError, match="unit 4 is outside"):
        q.global_index(4, (0, 0))


# ---------------------------------------------------------------- equality and derived patterns
def test_equal_patterns_put_every_element_in_the_same_place():
    a = Pattern((8, 6), (BLOCKED, NONE), team=4)
    assert a == Pattern((8, 6), "blocked", team=4)
    assert a == Pattern((8, 6), (BLOCKED, NONE), team=4, grid=(4, 1))
    assert a != Pattern((8, 6), (CYCLIC, NONE), team=4)
    assert a != Pattern((8, 7), (BLOCKED, NONE), team=4)
    assert a != Pattern((8, 6), (BLOCKED, BLOCKED), team=4)          # grid (2, 2)
    assert a != Pattern((8, 6), (BLOCKED, NONE), team=2)
    assert a != (8, 6) and not (a == "Pattern")
    # block-cyclic with a block at least the extent is BLOCKED's layout only along a 1-unit axis
    assert Pattern(4, BLOCKCYCLIC(8), team=1) == Pattern(4, CYCLIC, team=1)
    assert Pattern(4, BLOCKCYCLIC(8), team=2) == Pattern(4, BLOCKCYCLIC(4), team=2)
    assert Pattern(8, TILE(4), team=2) != Pattern(8, BLOCKCYCLIC(4), team=2)     # the same owners, not storage
    with pytest.raises(TypeError):
        hash(a)


def test_repr_names_shape_specs_grid_and_units():
    assert repr(Pattern((37, 5), (BLOCKCYCLIC(4), NONE), team=3)) == \
        "Pattern(shape=(37, 5), dist=(BLOCKCYCLIC(4), NONE), grid=(3, 1), units=3)"
    assert repr(Pattern(6, TILE(2), team=2)) == "Pattern(shape=(6,), dist=(TILE(2)), grid=(2,), units=2)"


def test_with_team_keeps_the_layout():
    p = Pattern((8, 6), (BLOCKED, CYCLIC), team=6, grid=(3, 2))
    q = p.with_team(6)
    assert q == p and q.grid == (3, 2) and q.dist == p.dist and q.shape == p.shape
    with pytest.raises(ValueError):
        p.with_team(4)


# ---------------------------------------------------------------- storage
def test_untiled_storage_is_the_local_block():
    p = Pattern((7, 4), (CYCLIC, BLOCKED), team=4)
    assert not p.tiled and p.tile_shape == (7, 4)
    for u in range(4):
        ls = p.local_shape(u)
        assert p.storage_shape(u) == ls
        block = np.arange(int(np.prod(ls))).reshape(ls)
        assert p.local_to_storage(block) is block and p.storage_to_local(block) is block
        assert p.storage_index((1, 0)) == (1, 0)


def test_tiled_storage_against_a_hand_made_layout():
    """Two units, TILE(2) x NONE over (8, 3): unit 0 owns rows 0,1,4,5 as two 2x3 tiles; its
    storage has shape (2, 1, 2, 3) = (tiles along 0, tiles along 1, tile rows, tile columns)."""
    p = Pattern((8, 3), (TILE(2), NONE), team=2)
    assert p.tiled and p.tile_shape == (2, 3) and p.grid == (2, 1)
    assert p.local_shape(0) == (4, 3) and p.storage_shape(0) == (2, 1, 2, 3)
    glob = np.arange(24).reshape(8, 3)
    local0 = glob[[0, 1, 4, 5]]
    storage = p.local_to_storage(local0)
    assert storage.shape == (2, 1, 2, 3)
    assert np.array_equal(storage[0, 0], glob[0:2]) and np.array_equal(storage[1, 0], glob[4:6])
    assert np.array_equal(p.storage_to_local(storage), local0)
    assert p.storage_index((3, 2)) == (1, 0, 1, 2)
    gi = np.broadcast_arrays(*p.local_global_indices(0))
    assert np.array_equal(glob[tuple(gi)], storage)


def test_tiled_storage_of_a_unit_without_tiles():
    p = Pattern((4, 6), (TILE(2), TILE(3)), team=4, grid=(4, 1))
    for u in range(4):        # a shape NumPy takes: integers
        assert np.empty(p.storage_shape(u)).shape == p.storage_shape(u)
        assert all(type(n) is int for n in p.storage_shape(u))
    assert p.local_shape(3) == (0, 6) and p.storage_shape(3) == (0, 2, 2, 3)
    assert p.storage_shape(0) == (1, 2, 2, 3)
    q = Pattern((0, 4), (TILE(2), NONE), team=2)
    assert q.tile_shape == (2, 4) and q.storage_shape(1) == (0, 1, 2, 4)
    r = Pattern((4, 0), (TILE(2), NONE), team=2)
    assert r.tile_shape == (2, 0) and r.storage_shape(0) == (1, 0, 2, 0)


@pytest.mark.parametrize("shape", [(4, 0), (0, 4), (6, 3)])
def test_local_storage_round_trip_with_empty_dimensions(shape):
    """local_to_storage / storage_to_local invert each other and give storage_shape, also where a
    NONE dimension has extent 0 (its tile extent is 0: the split divided by it before)."""
    p = Pattern(shape, (TILE(2), NONE), team=2)
    for u in range(2):
        loc = np.arange(int(np.prod(p.local_shape(u))), dtype=float).reshape(p.local_shape(u))
        st = p.local_to_storage(loc)
        assert st.shape == p.storage_shape(u)
        assert np.array_equal(p.storage_to_local(st), loc)

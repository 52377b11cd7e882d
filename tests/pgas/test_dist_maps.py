"""One dimension's index maps (hpcsuite.pgas.dist.DimMap) against references built by enumeration
(tests/pgas/reference.py: numpy.array_split for BLOCKED, dealing blocks round-robin for the
block-cyclic specs), scalar and vectorised, including more coordinates than elements; the specs'
names and errors (issue 21 item 5: tests that catch mutated index arithmetic)."""
import itertools

import numpy as np
import pytest

from hpcsuite.pgas import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE, TILE
from hpcsuite.pgas.dist import DimMap, DistSpec, as_spec

from reference import owner_table

# extents and coordinate counts: even, uneven, fewer elements than coordinates, empty
CASES = [(n, p) for n in (0, 1, 2, 3, 7, 10, 12, 13, 29) for p in (1, 2, 3, 4, 5, 11)]
SPECS = [BLOCKED, CYCLIC, BLOCKCYCLIC(2), BLOCKCYCLIC(3), BLOCKCYCLIC(5), BLOCKCYCLIC(40)]


def dimmap(spec, n, p):
    return DimMap(spec, n, p)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_every_query_matches_the_enumeration(spec):
    for n, p in CASES:
        m = dimmap(spec, n, p)
        owner, local = owner_table(spec, n, p)
        g = np.arange(n)
        # vectorised
        assert np.array_equal(m.owner(g), owner), (spec, n, p)
        assert np.array_equal(m.local(g), local), (spec, n, p)
        assert np.array_equal(m.glob(owner, local), g), (spec, n, p)
        sizes = np.bincount(owner, minlength=p) if n else np.zeros(p, int)
        assert m.max_size() == sizes.max(), (spec, n, p)
        for c in range(p):
            mine = np.flatnonzero(owner == c)
            assert m.size(c) == len(mine), (spec, n, p, c)
            assert np.array_equal(m.owned(c), mine), (spec, n, p, c)
            runs = m.owned_runs(c)
            # runs: consecutive, disjoint, increasing and covering exactly the owned indices
            covered = np.concatenate([np.arange(s, s + k) for s, k in runs]) if runs else np.zeros(0, int)
            assert np.array_equal(covered, mine), (spec, n, p, c, runs)
            assert all(k > 0 for _, k in runs)
            if not m.cyclic and len(mine):
                assert m.start(c) == mine[0] and runs == [(int(mine[0]), len(mine))]
        # scalar queries agree with the vectorised ones
        for i in range(n):
            o, l = m.owner(i), m.local(i)
            assert (int(o), int(l)) == (owner[i], local[i]), (spec, n, p, i)
            assert int(m.glob(int(o), int(l))) == i


def test_blocked_starts_follow_array_split_also_vectorised():
    for n, p in CASES:
        m = DimMap(BLOCKED, n, p)
        starts = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(n), p)])[:-1]
        assert [m.start(c) for c in range(p)] == list(starts), (n, p)
        assert np.array_equal(m.start(np.arange(p)), starts), (n, p)


def test_none_and_single_coordinate_maps_are_the_identity():
    for spec in (NONE, BLOCKED, CYCLIC, BLOCKCYCLIC(4)):
        m = DimMap(spec, 9, 1)
        g = np.arange(9)
        assert np.array_equal(m.owner(g), np.zeros(9)) and np.array_equal(m.local(g), g)
        assert m.owner(5) == 0 and m.local(5) == 5 and m.size(0) == 9 and m.max_size() == 9


def test_tile_owns_like_blockcyclic():
    for n, p in [(12, 2), (12, 5), (20, 3), (0, 2)]:
        t, bc = DimMap(TILE(4), n, p), DimMap(BLOCKCYCLIC(4), n, p)
        g = np.arange(n)
        assert np.array_equal(t.owner(g), bc.owner(g)) and np.array_equal(t.local(g), bc.local(g))
        assert t.cyclic and t.b == 4


def same_tables(a, b):
    ga = np.arange(a.n)
    return np.array_equal(a.owner(ga), b.owner(ga)) and np.array_equal(a.local(ga), b.local(ga))


def test_same_as_is_sound_and_complete_within_a_family():
    """``same_as`` true => every index has the same owner and local index. Between two block-cyclic
    maps, or two blocked ones, the converse holds too; blocked vs block-cyclic is documented as
    'different' even where the layouts coincide (a copy is always correct)."""
    specs = [BLOCKED, NONE, CYCLIC, BLOCKCYCLIC(2), BLOCKCYCLIC(3), BLOCKCYCLIC(4), BLOCKCYCLIC(8)]
    for n, p in [(1, 1), (4, 1), (3, 2), (4, 2), (8, 2), (9, 3), (16, 4), (2, 4)]:
        for sa, sb in itertools.product(specs, repeat=2):
            if p > 1 and "none" in (sa.kind, sb.kind):
                continue
            a, b = DimMap(sa, n, p), DimMap(sb, n, p)
            same = a.same_as(b)
            assert same == b.same_as(a)
            if same:
                assert same_tables(a, b), (sa, sb, n, p)
            elif a.cyclic == b.cyclic:
                assert not same_tables(a, b), (sa, sb, n, p)
    assert not DimMap(BLOCKED, 8, 2).same_as(DimMap(BLOCKED, 9, 2))
    assert not DimMap(BLOCKED, 8, 2).same_as(DimMap(BLOCKED, 8, 4))
    assert not DimMap(BLOCKED, 8, 2).same_as(DimMap(BLOCKCYCLIC(4), 8, 2))    # same layout, other family
    assert DimMap(CYCLIC, 8, 1).same_as(DimMap(BLOCKED, 8, 1))


def test_spec_names_and_constructors():
    assert [repr(s) for s in (BLOCKED, CYCLIC, NONE, BLOCKCYCLIC(1), BLOCKCYCLIC(7), TILE(4))] == [
        "BLOCKED", "CYCLIC", "NONE", "CYCLIC", "BLOCKCYCLIC(7)", "TILE(4)"]
    assert BLOCKCYCLIC(1) == CYCLIC and BLOCKCYCLIC(np.int64(3)) == BLOCKCYCLIC(3)
    assert type(BLOCKCYCLIC(np.int64(3)).block) is int
    assert repr(DimMap(TILE(4), 8, 2)) == "DimMap(TILE(4), n=8, p=2)"
    assert DimMap(BLOCKED, 8, 2).b == 0 and not DimMap(BLOCKED, 8, 2).cyclic and DimMap(CYCLIC, 8, 2).b == 1


@pytest.mark.parametrize("name,spec", [("blocked", BLOCKED), ("BLOCKED", BLOCKED), ("Cyclic", CYCLIC),
                                       ("none", NONE), ("NONE", NONE)])
def test_spec_names_are_accepted_in_any_case(name, spec):
    assert as_spec(name) == spec and as_spec(spec) is spec


@pytest.mark.parametrize("bad", ["tile", "blockcyclic", "", 3, None, ("blocked",)])
def test_unknown_spec_names_are_refused(bad):
    with pytest.raises(ValueError) as e:
        as_spec(bad)
    assert str(e.value) == f"distribution must be BLOCKED, CYCLIC, BLOCKCYCLIC(b), TILE(b) or NONE, got {bad!r}"


@pytest.mark.parametrize("make,name", [(BLOCKCYCLIC, "BLOCKCYCLIC"), (TILE, "TILE")])
@pytest.mark.parametrize("bad", [0, -3, True, 2.0, "4", None])
def test_block_sizes_must_be_positive_integers(make, name, bad):
    with pytest.raises(ValueError) as e:
        make(bad)
    assert str(e.value) == f"{name}: block size must be a positive integer, got {bad!r}"


def test_map_errors_name_the_problem():
    with pytest.raises(ValueError) as e:
        DimMap(NONE, 8, 2)
    assert str(e.value) == "a NONE dimension needs process-grid extent 1, got 2"
    with pytest.raises(ValueError) as e:
        DimMap(TILE(4), 10, 2)
    assert str(e.value) == ("TILE(4) needs the extent 10 to be a multiple of 4 (partial tiles are not stored; "
                            "use BLOCKCYCLIC(4))")
    assert DimMap(TILE(5), 10, 3).size(2) == 0
    assert isinstance(DistSpec("blocked"), DistSpec) and DistSpec("blocked") == BLOCKED

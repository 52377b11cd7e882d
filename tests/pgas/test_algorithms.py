"""Collective algorithms (fill, generate, for_each, transform, reductions, min/max_element, find,
all/any, dot, norm) against NumPy on the same data, for every distribution 1-D to 3-D with uneven
extents and TILE patterns; argument errors raise ValueError on every rank.

Window creation is the expensive collective (most of all with 4 ranks on 2 cores), so the arrays
are allocated once per module (``pool``) and results are checked on each rank against its own
elements of the NumPy reference, which needs no communication.
"""
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKED, CYCLIC, NONE, TILE

from reference import all_dists, load, owned, shape_for

DISTS = [d for nd in (1, 2, 3) for d in all_dists(nd, tile_ok=True)]
IDS = ["-".join(map(repr, d)) for d in DISTS]




def holds(a, ref) -> bool:
    """Whether this unit's block of ``a`` equals its part of ``ref`` (values and dtype kind). Local."""
    return a.local.dtype.kind == np.asarray(ref).dtype.kind and np.array_equal(a.local, ref[owned(a)])


def usable(dist, team):
    """All-NONE patterns exist on one unit only."""
    return team.size == 1 or any(s.kind != "none" for s in dist)


def other_dist(dist):
    """A different distribution of the same rank (accepting TILE extents), to force redistribution."""
    choice = {1: [(CYCLIC,), (BLOCKED,)], 2: [(CYCLIC, CYCLIC), (BLOCKED, NONE)],
              3: [(CYCLIC, BLOCKED, NONE), (BLOCKED, NONE, NONE)]}[len(dist)]
    return choice[0] if choice[0] != tuple(dist) else choice[1]


def first(mask):
    """The first row-major index where ``mask`` holds, as a tuple of ints (or None)."""
    hits = np.argwhere(mask)
    return tuple(int(i) for i in hits[0]) if len(hits) else None


@pytest.mark.mpi
@pytest.mark.parametrize("dist", DISTS, ids=IDS)
def test_algorithms_against_numpy(team, pool, dist):
    if not usable(dist, team):
        pytest.skip("an all-NONE pattern lives on one unit: it cannot be distributed over "
                    f"{team.size} ranks (test_array checks that error)")
    shape = shape_for(dist)
    a = pool(shape, dist)
    pgas.fill(a, 2.5)
    assert holds(a, np.full(shape, 2.5))
    # generate: small integers with many ties, from the global index (exact in float64)
    idx = np.indices(shape)
    weights = (7, 3, 1)[-len(shape):]

    def formula(*ix):
        return sum(w * i for w, i in zip(weights, ix)) % 11 - 5.0
    pgas.generate(a, formula)
    ref = formula(*idx)
    assert holds(a, ref)
    calls = []
    pgas.for_each(a, lambda x: (calls.append(x.shape), x.__imul__(2.0)))
    assert calls == [a.local.shape]                # once per unit, empty blocks included
    ref = ref * 2.0

    def add_index(x, *ix):
        x += ix[-1] % 3 - np.broadcast_to(ix[0] % 2, x.shape)
    pgas.for_each_with_index(a, add_index)
    ref = ref + idx[-1] % 3 - idx[0] % 2
    assert holds(a, ref)
    pgas.transform(np.subtract, 1.0, a, out=a)    # in place, a scalar first
    ref = 1.0 - ref
    assert holds(a, ref)
    # reductions: exact, since the values are small integers
    assert pgas.reduce(a) == ref.sum() and pgas.reduce(a, "min") == ref.min()
    assert pgas.reduce(a, "max") == ref.max()
    for fn, arg in ((pgas.min_element, np.argmin), (pgas.max_element, np.argmax)):
        want = tuple(int(i) for i in np.unravel_index(arg(ref), shape))
        assert fn(a) == (want, ref[want]), fn.__name__
    v = ref.max() - 1
    assert pgas.find(a, v) == first(ref == v) and pgas.find(a, 1e9) is None
    assert pgas.find(a, pred=lambda x: x < ref.min() + 2) == first(ref < ref.min() + 2)
    assert pgas.all(a, pred=lambda x: x >= ref.min()) and not pgas.all(a)      # ref has zeros
    assert pgas.any(a, pred=lambda x: x == ref.max()) and not pgas.any(a, pred=np.isnan)
    assert pgas.dot(a, a) == np.dot(ref.ravel(), ref.ravel())
    assert np.isclose(pgas.norm(a), np.linalg.norm(ref.ravel()), rtol=1e-14)
    assert pgas.norm(a, 1) == np.abs(ref).sum() and pgas.norm(a, np.inf) == np.abs(ref).max()


@pytest.mark.mpi
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_transform_and_dot_redistribute(team, pool, nd):
    tile = tuple(TILE(t) for t in {1: (5,), 2: (4, 5), 3: (2, 5, 3)}[nd])
    shape = shape_for(tile)
    rng = np.random.default_rng(nd)
    ra, rb = rng.standard_normal(shape), rng.standard_normal(shape)
    a = load(pool(shape, tile), ra)                                 # tile-major storage
    b = load(pool(shape, other_dist(tile)), rb)                     # cyclic along dimension 0
    out = pool(shape, other_dist(tile), tag="out")
    before = pgas.live_segments()
    c = pgas.transform(np.add, a, b)              # a new array in a's pattern, b redistributed
    assert c.pattern == a.pattern and holds(c, ra + rb)
    assert pgas.live_segments() == before + 1     # the temporary for b was freed
    r = pgas.transform(lambda x, y, s: x * y + s, a, c, 3.0, out=out)   # both inputs moved
    assert r is out and np.allclose(out.local, (ra * (ra + rb) + 3.0)[owned(out)], rtol=0, atol=1e-13)
    m = pgas.transform(np.greater, b, 0.5)        # the result dtype follows NumPy
    assert m.dtype == np.bool_ and m.pattern == b.pattern and holds(m, rb > 0.5)
    assert pgas.live_segments() == before + 2
    assert np.isclose(pgas.dot(a, b), np.dot(ra.ravel(), rb.ravel()), rtol=1e-12)
    assert pgas.dot(m, m) == np.dot((rb > 0.5).ravel(), (rb > 0.5).ravel())
    assert pgas.live_segments() == before + 2
    c.free()
    m.free()


@pytest.mark.mpi
def test_reduce_ops_dtypes_and_agreement(team, pool):
    n = 1031
    ri = (np.arange(n) * 37 % 23 - 11).astype(np.int64)
    a = load(pool((n,), (CYCLIC,), np.int64), ri)
    assert pgas.reduce(a, np.add) == np.add.reduce(ri)
    assert pgas.reduce(a, np.bitwise_or) == np.bitwise_or.reduce(ri)
    assert pgas.reduce(a, np.maximum) == ri.max()
    # a Python callable, associative and commutative, with its identity
    assert pgas.reduce(a, lambda x, y: x ^ y, identity=0) == np.bitwise_xor.reduce(ri)
    signs = load(pool((n,), (BLOCKED,), np.int8), np.where(ri >= 0, 1, -1).astype(np.int8))
    assert pgas.reduce(signs, "prod") == np.prod(np.where(ri >= 0, 1, -1))
    s = pgas.reduce(signs, "sum")                 # int8 is promoted as numpy.sum does
    assert s == np.where(ri >= 0, 1, -1).sum() and s.dtype == np.sum(np.ones(1, np.int8)).dtype
    # floating-point results are the same on every rank, bit for bit
    rf = np.random.default_rng(3).standard_normal(n) * 10.0 ** (np.arange(n) % 7)
    f = load(pool((n,), (CYCLIC,)), rf)
    got = (pgas.reduce(f), pgas.dot(f, f), pgas.norm(f), pgas.norm(f, 1))
    assert len(set(team.allgather(repr(got)))) == 1
    want = (rf.sum(), np.dot(rf, rf), np.linalg.norm(rf), np.abs(rf).sum())
    assert np.allclose(got, want, rtol=1e-13, atol=0)


@pytest.mark.mpi
def test_nan_and_complex_follow_numpy(team, pool):
    ref = np.arange(40.0)[::-1].copy()
    ref[[7, 23]] = np.nan
    a = load(pool((40,), (CYCLIC,)), ref)
    # NaNs win min and max, the first one in order, as with np.argmin / np.argmax
    (i, v), (j, w) = pgas.min_element(a), pgas.max_element(a)
    assert i == j == (7,) and np.isnan(v) and np.isnan(w)
    assert np.isnan(pgas.reduce(a, "min")) and np.isnan(pgas.reduce(a, "sum"))
    assert pgas.find(a, np.nan) is None and pgas.find(a, pred=np.isnan) == (7,)
    z = np.array([1 + 2j, 3 - 1j, 1 + 1j, -2j, 3 + 0j, 1 + 1j, 3 + 0j])
    c = load(pool((7,), (CYCLIC,), np.complex128), z)
    # complex numbers order lexicographically in NumPy: min -2j (index 3), max 3+0j (index 4)
    assert pgas.min_element(c) == ((int(np.argmin(z)),), z.min()) == ((3,), -2j)
    assert pgas.max_element(c) == ((int(np.argmax(z)),), z.max()) == ((4,), 3 + 0j)
    assert pgas.dot(c, c) == np.dot(z, z)
    assert np.isclose(pgas.norm(c), np.linalg.norm(z)) and pgas.norm(c, np.inf) == np.abs(z).max()


@pytest.mark.mpi
def test_tile_storage_order_is_not_row_major(team, pool):
    # In tile-major storage (1, 0) (in tile (0, 0)) comes before (0, 2) (in tile (0, 1)); the
    # row-major answer is (0, 2).
    ref = np.full((8, 8), 5.0)
    ref[1, 0] = ref[0, 2] = -1.0
    ref[6, 1] = ref[5, 7] = 9.0
    a = load(pool((8, 8), (TILE(2), TILE(2))), ref)
    assert pgas.min_element(a) == ((0, 2), -1.0) and pgas.max_element(a) == ((5, 7), 9.0)
    assert pgas.find(a, -1.0) == (0, 2) and pgas.find(a, pred=lambda x: x > 6) == (5, 7)
    pgas.fill(a, 3.0)
    assert pgas.min_element(a) == ((0, 0), 3.0) and pgas.max_element(a) == ((0, 0), 3.0)


@pytest.mark.mpi
@pytest.mark.parametrize("shape", [(0,), (3,), (0, 5), (2, 1)], ids=str)
def test_empty_arrays_and_empty_blocks(team, pool, shape):
    # (3,) and (2, 1) over up to 4 units: some units own nothing
    ref = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + 1
    a = load(pool(shape, (CYCLIC,) + (NONE,) * (len(shape) - 1)), ref)
    assert pgas.reduce(a, "sum") == ref.sum() and pgas.reduce(a, "prod") == ref.prod()
    assert pgas.reduce(a, lambda x, y: x + y, identity=0.0) == ref.sum()
    assert pgas.all(a) is bool(np.all(ref)) and pgas.any(a) is bool(np.any(ref))
    assert pgas.find(a, 2.0) == first(ref == 2.0)
    assert pgas.dot(a, a) == np.dot(ref.ravel(), ref.ravel())
    assert pgas.norm(a) == np.linalg.norm(ref.ravel())
    assert pgas.norm(a, np.inf) == (ref.max() if ref.size else 0)
    if ref.size == 0:
        with pytest.raises(ValueError, match="empty"):
            pgas.reduce(a, "min")
        with pytest.raises(ValueError, match="empty"):
            pgas.min_element(a)
        assert pgas.reduce(a, "min", identity=np.inf) == np.inf
    else:
        assert pgas.reduce(a, "min") == ref.min() and pgas.max_element(a)[1] == ref.max()
    pgas.generate(a, lambda *ix: ix[0] * 1.0)
    assert holds(a, np.broadcast_to(np.indices(shape)[0] * 1.0, shape))


@pytest.mark.mpi
def test_exceptions_in_user_functions_reach_every_rank(team, pool):
    a = load(pool((20,), (CYCLIC,)), np.arange(20.0))
    last = team.size - 1

    def boom(*ix):
        if team.rank == last:
            raise ZeroDivisionError("only on the last rank")
        return 1.0
    with pytest.raises(ZeroDivisionError, match="only on the last rank"):
        pgas.generate(a, boom)
    with pytest.raises(ZeroDivisionError):
        pgas.for_each(a, lambda x: boom())
    with pytest.raises(ZeroDivisionError):
        pgas.find(a, pred=lambda x: x > boom())
    with pytest.raises(ZeroDivisionError):
        pgas.transform(lambda x: boom() * x, a, out=a)
    with pytest.raises(TypeError):
        pgas.reduce(a, lambda x, y: x + "text", identity=0.0)
    # the team is still in step: a plain collective works and agrees (the failed generate left
    # the blocks of the ranks that did not fail written)
    assert pgas.reduce(a, "sum") == a.to_numpy().sum()


@pytest.mark.mpi
def test_bad_arguments_raise_value_error_on_every_rank(team, pool):
    a, b = pool((12,), (CYCLIC,)), pool((13,), (BLOCKED,))
    m, e = pool((4, 3), (BLOCKED, NONE)), pool((0,), (BLOCKED,))
    before = pgas.live_segments()
    cases = [
        (lambda: pgas.reduce(a, "mean"), r"reduce: op must be 'sum', 'prod', 'min', 'max'"),
        (lambda: pgas.reduce(a, np.sin), "reduce: op must be"),
        (lambda: pgas.reduce(a, 42), "reduce: op must be"),
        (lambda: pgas.reduce(a, np.bitwise_and), "cannot reduce elements of dtype float64"),
        (lambda: pgas.reduce(e, "max"), "reduce: the array is empty and op 'max' has no identity"),
        (lambda: pgas.reduce(np.zeros(3)), "reduce: a must be a DistArray"),
        (lambda: pgas.transform(np.add, a, b),
         r"transform: input 1 has shape \(13,\) but input 0 has shape \(12,\)"),
        (lambda: pgas.transform(np.add, a), "transform: ufunc add takes 2 input"),
        (lambda: pgas.transform(np.negative, a, out=b),
         r"input 0 has shape \(12,\) but out has shape \(13,\)"),
        (lambda: pgas.transform(np.add, a, np.ones(12)),
         "transform: input 1 must be a DistArray or a scalar"),
        (lambda: pgas.transform(np.add, 1.0, 2.0), "transform: pass at least one DistArray"),
        (lambda: pgas.transform("add", a, a), "transform: op must be a NumPy ufunc or a vectorised callable"),
        (lambda: pgas.dot(a, b), r"dot: a has shape \(12,\) but b has shape \(13,\)"),
        (lambda: pgas.dot(a, m), r"dot: a has shape \(12,\) but b has shape \(4, 3\)"),
        (lambda: pgas.norm(a, 3), "norm: ord must be None, 2, 'fro'"),
        (lambda: pgas.norm(a, "nuc"), "norm: ord must be"),
        (lambda: pgas.find(a), "find: pass exactly one of value and pred="),
        (lambda: pgas.find(a, 1.0, pred=bool), "find: pass exactly one"),
        (lambda: pgas.find(a, [1.0, 2.0]), "find: value must be a scalar"),
        (lambda: pgas.all(a, pred=3), "all: pred must be callable"),
        (lambda: pgas.fill(a, [1, 2]), "fill: value must be a scalar"),
        (lambda: pgas.fill(a, "x"), "fill: value='x' cannot be stored as float64"),
        (lambda: pgas.generate(a, 5), "generate: fn must be callable"),
        (lambda: pgas.for_each(m, None), "for_each: fn must be callable"),
        (lambda: pgas.min_element(e), "min_element: the array is empty"),
        (lambda: pgas.max_element(b.local), "max_element: a must be a DistArray"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call()
    # nothing was allocated or left behind, and no rank is stuck in a collective
    assert pgas.live_segments() == before
    pgas.fill(a, 1.0)
    assert pgas.reduce(a, "sum") == 12.0

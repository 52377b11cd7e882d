"""Distributed sort and prefix scans against numpy.sort / numpy.cumsum on the same data: every
1-D distribution with extents 1031, 3, 1 and 0 (TILE: multiples of its tile), duplicates,
all-equal input, NaNs, more units than elements; N-D scans along each axis for every 2-D and 3-D
distribution; argument errors raise ValueError on every rank.

Window creation is the expensive collective (most of all with 4 ranks on 2 cores), so arrays are
allocated once per module and each rank checks its own elements against the reference.
"""
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKED, CYCLIC, NONE
from hpcsuite.runtime import intercept

from reference import all_dists, load, owned, shape_for

DISTS_1D = all_dists(1, tile_ok=True)
EXTENTS = (1031, 3, 1, 0)
DISTS_ND = [d for nd in (2, 3) for d in all_dists(nd, tile_ok=True)]




def holds(a, ref, exact=True) -> bool:
    """Whether this unit's block of ``a`` equals its part of ``ref`` (NaNs equal). Local."""
    mine = np.asarray(ref)[owned(a)]
    if exact:
        return np.array_equal(a.local, mine, equal_nan=a.dtype.kind in "fc")
    return np.allclose(a.local, mine, rtol=1e-12, atol=1e-9)


def extent(dist, n):
    """``n``, rounded up to whole tiles for TILE."""
    b = dist[0].block if dist[0].kind == "tile" else 1
    return -(-n // b) * b


def cases_1d(team):
    for dist in DISTS_1D:
        if dist[0].kind == "none" and team.size > 1:
            continue                   # an undistributed array exists on one unit only
        for n in EXTENTS:
            yield dist, extent(dist, n)


def data(kind, n):
    """Test data as float64 (one pool array per layout serves every kind)."""
    rng = np.random.default_rng(n)
    if kind == "floats":                          # with NaNs, -0.0 and 0.0
        x = rng.standard_normal(n)
        x[::97] = np.nan
        x[5::101] = -0.0
        x[7::103] = 0.0
        return x
    if kind == "duplicates":
        return rng.integers(-3, 4, n).astype(np.float64)
    if kind == "equal":
        return np.full(n, 4.0)
    return np.arange(n, dtype=np.float64)[::-1].copy()        # "reversed"


@pytest.mark.mpi
def test_sort_every_distribution_against_numpy(team, pool):
    for dist, n in cases_1d(team):
        a = pool((n,), dist)
        for kind, descending in [("floats", False), ("duplicates", True), ("equal", False),
                                 ("reversed", False), ("floats", True)]:
            ref = data(kind, n)
            load(a, ref)
            pattern = a.pattern
            assert pgas.sort(a, descending=descending) is a
            want = np.sort(ref)[::-1] if descending else np.sort(ref)
            assert a.pattern == pattern and holds(a, want), (dist, n, kind, descending)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["equal", "duplicates", "floats"])
def test_sort_spreads_the_work(team, pool, kind):
    # No unit receives much more than its share in the exchange, even when all values are equal,
    # and the samples every unit sees are at most p**2 and half the array.
    n, p = 1031, team.size
    ref = data(kind, n)
    a = load(pool((n,), (CYCLIC,)), ref)
    seen = {"Alltoallv": [], "allgather": []}

    def spy(team_, name, nbytes, fn, args, kwargs):
        result = fn(*args, **kwargs)
        if name == "Alltoallv":
            seen[name].append(len(args[1][0]))
        elif name == "allgather" and isinstance(args[0], np.ndarray):
            seen[name].append(sum(len(x) for x in result))
        return result
    with intercept(spy):
        pgas.sort(a)
    assert holds(a, np.sort(ref))
    if p > 1:                                     # (one unit sorts locally, without messages)
        buckets = team.allgather(seen["Alltoallv"][0])     # the first exchange: the buckets
        assert sum(buckets) == n
        w = max(2, -(-n // p**2))                 # elements per sample
        assert max(buckets) <= n / p + 2 * (p + 1) * w, (buckets, n, p)
        assert max(buckets) < n
        assert seen["allgather"][0] <= min(p * p, n // 2)
    # the sorted values are visible to one-sided reads from any rank once sort returns
    assert np.array_equal(a[::-3], np.sort(ref)[::-3], equal_nan=True)
    team.barrier()                                # before the next test overwrites the array


@pytest.mark.mpi
def test_scan_every_1d_distribution_against_numpy(team, pool):
    for dist, n in cases_1d(team):
        ri = (np.arange(n) * 37 % 23 - 11).astype(np.float64)      # small integers: exact sums
        signs = np.where(ri >= 0, 1.0, -1.0)
        rf = np.random.default_rng(n).standard_normal(n)
        a = pool((n,), dist)                      # the sort test's array
        for ref, op, excl, want, exact in [
            (ri, "sum", False, np.cumsum(ri), True),
            (ri, "sum", True, np.concatenate(([0], np.cumsum(ri)[:-1])), True),
            (ri, "max", False, np.maximum.accumulate(ri), True),
            (ri, "min", True, np.concatenate(([np.inf], np.minimum.accumulate(ri)[:-1])), True),
            (signs, "prod", False, np.cumprod(signs), True),
            (rf, np.maximum, True, np.concatenate(([-np.inf], np.maximum.accumulate(rf)[:-1])), True),
            (rf, "sum", False, np.cumsum(rf), False),
        ]:
            load(a, ref)
            assert pgas.scan(a, op, exclusive=excl, out=a) is a      # in place: no temporaries
            assert holds(a, want[:n], exact=exact), (dist, n, op, excl)
        if n == 1031:
            # into an array of another distribution, and into a new array in a's pattern
            load(a, ri)
            other = pool((n,), (pgas.BLOCKCYCLIC(2),), tag="out")
            assert pgas.cumsum(a, out=other) is other and holds(other, np.cumsum(ri))
            c = pgas.cumsum(a, exclusive=True)
            assert c.pattern == a.pattern and holds(c, np.cumsum(ri) - ri)
            c.free()


@pytest.mark.mpi
def test_scan_with_an_op_without_identity(team, pool):
    # np.lcm has no identity: the block totals travel as (value, valid) pairs instead of buffers
    for dist, n in [(d, extent(d, 1031)) for d in DISTS_1D] + [((CYCLIC,), 3)]:
        if dist[0].kind == "none" and team.size > 1:
            continue
        ref = np.arange(n) % 6 + 1
        a = load(pool((n,), dist, np.int64), ref)
        assert holds(pgas.scan(a, np.lcm, out=a), np.lcm.accumulate(ref)), dist


@pytest.mark.mpi
def test_scan_dtypes_follow_numpy(team, pool):
    r8 = (np.arange(300) % 7 + 100).astype(np.int8)       # sums overflow int8
    a = load(pool((300,), (CYCLIC,), np.int8), r8)
    c = pgas.cumsum(a)
    assert c.dtype == np.cumsum(r8).dtype and holds(c, np.cumsum(r8))
    b = load(pool((300,), (BLOCKED,), np.bool_), r8 % 3 == 0)
    d = pgas.scan(b, np.logical_xor)
    assert d.dtype == np.bool_ and holds(d, np.logical_xor.accumulate(r8 % 3 == 0))
    s = pgas.cumsum(b)                     # booleans count as numpy.cumsum does
    assert s.dtype == np.cumsum(r8 % 3 == 0).dtype and holds(s, np.cumsum(r8 % 3 == 0))
    r = (np.arange(1031) * 37 % 23 - 11).astype(np.int64)
    i = load(pool((1031,), (pgas.BLOCKCYCLIC(3),), np.int64), r)
    for op, want in [(np.bitwise_xor, np.bitwise_xor.accumulate(r)),
                     ("min", np.minimum.accumulate(r)), ("max", np.maximum.accumulate(r))]:
        first = {"min": np.iinfo(np.int64).max, "max": np.iinfo(np.int64).min}.get(op, 0)
        load(i, r)
        pgas.scan(i, op, exclusive=True, out=i)
        assert holds(i, np.concatenate(([first], want[:-1])))
    for x in (c, d, s):
        x.free()


@pytest.mark.mpi
def test_sort_integers_booleans_and_complex(team, pool):
    r = (np.arange(1031) * 37 % 23 - 11).astype(np.int64)
    i = load(pool((1031,), (pgas.BLOCKCYCLIC(3),), np.int64), r)
    pgas.sort(i, descending=True)
    assert holds(i, np.sort(r)[::-1])
    b = load(pool((300,), (BLOCKED,), np.bool_), np.arange(300) % 7 == 2)
    pgas.sort(b)
    assert holds(b, np.sort(np.arange(300) % 7 == 2))
    z = np.array([1 + 2j, 3 - 1j, 1 + 1j, -2j, 3 + 0j])       # lexicographic, as numpy.sort
    c = load(pool((5,), (BLOCKED,), np.complex128), z)
    pgas.sort(c)
    assert holds(c, np.sort(z))


@pytest.mark.mpi
def test_scan_nd_into_another_distribution(team, pool):
    shape = (37, 5)
    ref = np.random.default_rng(9).standard_normal(shape)
    a = load(pool(shape, (BLOCKED, NONE)), ref)
    out = pool(shape, (CYCLIC, CYCLIC))
    before = pgas.live_segments()
    pgas.cumsum(a, axis=0, out=out)               # axis 0 is distributed: via a temporary
    assert holds(out, np.cumsum(ref, axis=0), exact=False) and holds(a, ref)
    pgas.scan(a, "min", axis=1, out=out)          # axis 1 is local: scanned in place, then copied
    assert holds(out, np.minimum.accumulate(ref, axis=1))
    assert pgas.live_segments() == before


@pytest.mark.mpi
@pytest.mark.parametrize("dist", DISTS_ND, ids=["-".join(map(repr, d)) for d in DISTS_ND])
def test_scan_along_each_axis_against_numpy(team, pool, dist):
    shape = shape_for(dist)
    nd = len(shape)
    ref = np.random.default_rng(nd).standard_normal(shape)
    a = pool(shape, dist)
    for axis in range(nd):
        excl = axis % 2 == 1
        op = "sum" if axis != 2 else "max"
        acc = np.cumsum(ref, axis=axis) if op == "sum" else np.maximum.accumulate(ref, axis=axis)
        if excl:
            first = np.zeros_like(np.take(ref, [0], axis=axis)) if op == "sum" else -np.inf
            acc = np.concatenate([np.broadcast_to(first, np.take(ref, [0], axis=axis).shape),
                                  np.take(acc, np.arange(shape[axis] - 1), axis=axis)], axis=axis)
        load(a, ref)
        assert pgas.scan(a, op, exclusive=excl, out=a, axis=axis - nd if axis else axis) is a
        assert holds(a, acc, exact=False), (dist, axis)


@pytest.mark.mpi
def test_bad_arguments_raise_value_error_on_every_rank(team, pool):
    a, m = pool((12,), (CYCLIC,)), pool((4, 3), (BLOCKED, NONE))
    z = pool((5,), (BLOCKED,), np.complex128)
    before = pgas.live_segments()
    cases = [
        (lambda: pgas.sort(m), r"sort: a must be 1-D, got a 2-D array of shape \(4, 3\)"),
        (lambda: pgas.sort(a, descending="yes"), "sort: descending must be True or False"),
        (lambda: pgas.sort(np.zeros(3)), "sort: a must be a DistArray"),
        (lambda: pgas.scan(m), r"scan: axis is required for a 2-D array \(an int in \[-2, 2\)\)"),
        (lambda: pgas.cumsum(m, axis=2), r"scan: axis must be an int in \[-2, 2\)"),
        (lambda: pgas.scan(a, axis=1), r"scan: axis must be an int in \[-1, 1\)"),
        (lambda: pgas.scan(a, "mean"),
         "scan: op must be 'sum', 'prod', 'min', 'max' or a binary NumPy ufunc"),
        (lambda: pgas.scan(a, lambda x, y: x + y), "scan: op must be"),
        (lambda: pgas.scan(a, np.bitwise_or),
         "scan: op <ufunc 'bitwise_or'> cannot accumulate elements of dtype float64"),
        (lambda: pgas.scan(a, np.arctan2, exclusive=True),
         "scan: exclusive=True needs an op with an identity"),
        (lambda: pgas.scan(z, "min", exclusive=True),
         "exclusive=True needs an op with an identity for dtype complex128"),
        (lambda: pgas.scan(a, exclusive=1), "scan: exclusive must be True or False"),
        (lambda: pgas.cumsum(a, out=m), r"scan: a has shape \(12,\) but out has shape \(4, 3\)"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call()
    assert pgas.live_segments() == before
    load(a, np.arange(12.0))
    assert holds(pgas.cumsum(a, out=a), np.cumsum(np.arange(12.0)))

"""Reductions of DistArrays (sum, prod, mean, var, std, min, max, argmin, argmax, any, all,
ufunc.reduce, ufunc.accumulate / cumsum) against NumPy on the gathered arrays: random layouts,
dtypes, axes and keepdims at every rank count; NaN and tie rules; results alike on every rank;
reductions along an undistributed axis without communication; bad arguments raise alike before
communicating."""
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcsuite import pgas
from hpcsuite.runtime.comm_hooks import intercept

from numpy_layouts import B, C, N, BC, Comms, data, dist_array, gathered, layouts, mpi_settings, tolerance

pytestmark = pytest.mark.mpi

FUNCS = ("sum", "prod", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all")
WHERE_FUNCS = ("sum", "prod", "mean", "var", "std", "min", "max", "any", "all")


def compare(got, want, n, func):
    got = gathered(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (func, got.shape, want.shape)
    assert got.dtype == want.dtype, (func, got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        rtol, atol = tolerance(want.dtype, n)
        if func in ("var", "std"):          # deviations from a mean that is itself rounded
            rtol, atol = 4 * rtol, 4 * atol
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * 10, equal_nan=True, err_msg=func)
    else:
        np.testing.assert_array_equal(got, want, err_msg=func)


@mpi_settings(20)
@given(st.data())
def test_reductions_match_numpy(team, data_):
    lay = data_.draw(layouts(team.size, max_side=7), label="layout")
    shape = lay[0]
    dt = data_.draw(st.sampled_from((np.float64, np.float32, np.int64, np.int8, np.bool_)), label="dtype")
    func = data_.draw(st.sampled_from(FUNCS), label="func")
    nd = len(shape)
    axes = st.integers(-nd, nd - 1)
    if not func.startswith("arg"):          # tuples of distinct axes (any order, negative too)
        axes = st.one_of(axes, st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True)
                         .map(lambda xs: tuple(x - nd if x % 2 else x for x in xs)))
    axis = data_.draw(st.one_of(st.none(), axes), label="axis")
    keepdims = data_.draw(st.booleans(), label="keepdims")
    # where= (NumPy's reductions that take it): a full or trailing-axes NumPy mask, or a DistArray
    # mask in the array's layout; min / max need initial= with it (as in NumPy)
    wkind = data_.draw(st.sampled_from((None, None, "numpy", "trailing", "dist")), label="where") \
        if func in WHERE_FUNCS else None
    # values near 1 for floats (products stay finite), small integers (many ties for arg*)
    ref = data(shape, dt, 21, low=-3, high=3) if np.dtype(dt).kind != "f" else \
        (data(shape, dt, 21, low=0.8, high=1.25, nan=func in ("min", "max", "argmin", "argmax", "sum"))
         * np.where(data(shape, np.bool_, 22), 1, -1).astype(dt))
    a = dist_array(ref, lay)
    n = ref.size if axis is None else int(np.prod([shape[d] for d in np.atleast_1d(axis)]))
    kw = {} if func.startswith("arg") and keepdims is False else {"keepdims": keepdims}
    mask = None
    if wkind is not None:
        mask = data(shape if wkind != "trailing" else shape[-1:], np.bool_, 28)
        kw["where"] = dist_array(mask, lay) if wkind == "dist" else mask
        if func in ("min", "max"):
            kw["initial"] = np.asarray(1 if dt is not np.bool_ else True).astype(dt)[()]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            want = getattr(np, func)(ref, axis=axis, **{**kw, **({"where": mask} if mask is not None else {})})
        except ValueError as exc:               # an empty min / max / argmin: the same error
            with pytest.raises(ValueError) as info:
                getattr(np, func)(a, axis=axis, **kw)
            assert str(info.value).split()[0] == str(exc).split()[0]
            a.free()
            return
        got = getattr(np, func)(a, axis=axis, **kw)
        method = getattr(a, func)(axis=axis, **kw)
    compare(got, want, n, func)
    compare(method, want, n, func)
    if not isinstance(got, pgas.DistArray):      # a scalar: the same on every rank
        assert len({np.asarray(x).tobytes() for x in team.allgather(got)}) == 1
    del got, method
    if wkind == "dist":
        kw["where"].free()
    a.free()


@mpi_settings(4)
@given(st.data())
def test_ufunc_reduce_and_accumulate(team, data_):
    lay = data_.draw(layouts(team.size, max_side=7, tile_ok=False), label="layout")
    shape = lay[0]
    axis = data_.draw(st.integers(0, len(shape) - 1), label="axis")
    ints = data(shape, np.int32, 23, low=-5, high=5)
    bools = data(shape, np.bool_, 24)
    ai, ab = dist_array(ints, lay), dist_array(bools, lay)
    for uf, x, rx in ((np.add, ai, ints), (np.maximum, ai, ints), (np.bitwise_xor, ai, ints),
                      (np.logical_or, ab, bools), (np.multiply, ai, ints)):
        if rx.shape[axis] == 0 and uf.identity is None:
            continue
        compare(uf.reduce(x, axis=axis), uf.reduce(rx, axis=axis), 1, uf.__name__)
        compare(uf.reduce(x, axis=axis, keepdims=True), uf.reduce(rx, axis=axis, keepdims=True), 1, uf.__name__)
        if rx.size:
            compare(uf.accumulate(x, axis=axis), uf.accumulate(rx, axis=axis), 1, uf.__name__ + ".accumulate")
    compare(np.add.reduce(ai, axis=None), np.add.reduce(ints, axis=None), 1, "add.reduce(None)")
    if len(shape) == 1 and ints.size:
        compare(np.cumsum(ai), np.cumsum(ints), 1, "cumsum")
        compare(np.cumprod(ai), np.cumprod(ints), 1, "cumprod")
    ai.free()
    ab.free()


def test_var_is_stable_and_ddof(team):
    """Per-rank (mean, M2) pairs merged, never sums of squares: an offset of 1e9 does not wipe out
    a variance of ~0.3 (a sum of squares would keep no digit of it). Reference: the variance of the
    exactly shifted values (ref - 1e9 is exact), so the only error left is the rounding of the
    deviations from the mean near 1e9 (ulp 1.2e-7 against deviations ~0.5: ~1e-6 relative)."""
    ref = 1e9 + data((31, 6), np.float64, 25, low=-1, high=1)
    exact = ref - 1e9
    a = dist_array(ref, ((31, 6), (C, B), None))
    for axis in (None, 0, 1):
        for ddof in (0, 1):
            np.testing.assert_allclose(gathered(np.var(a, axis=axis, ddof=ddof)),
                                       np.var(exact, axis=axis, ddof=ddof), rtol=2e-6)
            np.testing.assert_allclose(gathered(a.std(axis=axis, ddof=ddof)),
                                       np.std(exact, axis=axis, ddof=ddof), rtol=1e-6)
    a.free()


def test_arg_reductions_pick_the_first_in_global_order(team):
    """Ties and NaNs resolve as NumPy's: the first position in row-major order, whatever rank owns
    it (a cyclic layout puts later elements on lower ranks)."""
    ref = np.zeros((12, 5))
    ref[[2, 7, 11], 3] = 5.0
    ref[[4, 9], 1] = -5.0
    nan = ref.copy()
    nan[8, 0] = nan[10, 4] = np.nan
    for dist in ((C, N), (BC(2), N), (B, B)):
        for r in (ref, nan):
            a = dist_array(r, (r.shape, dist, None))
            for func in ("argmax", "argmin"):
                for axis in (None, 0, 1):
                    compare(getattr(np, func)(a, axis=axis), getattr(np, func)(r, axis=axis), 1, func)
            a.free()


def test_local_axis_needs_no_communication(team):
    ref = data((10, 8, 3), np.float64, 26)
    a = dist_array(ref, (ref.shape, (B, N, N), None))
    a.sum(axis=2)                                   # pools the result's memory
    comms = Comms()
    with intercept(comms):
        s = a.sum(axis=2)
        m = a.max(axis=1, keepdims=True)
    assert comms.calls == []
    compare(s, ref.sum(axis=2), 3, "sum")
    compare(m, ref.max(axis=1, keepdims=True), 1, "max")
    del s, m
    a.free()


def test_bad_arguments_raise_alike(team):
    a = pgas.zeros((6, 4), dist=(B, N))
    e = pgas.zeros((0, 4), dist=(B, N))
    cases = [
        (lambda: np.sum(a, axis=2), np.exceptions.AxisError, "axis 2"),
        (lambda: np.sum(a, axis=(0, 0)), ValueError, "duplicate"),
        (lambda: np.var(a, axis=(0, 1, 0)), ValueError, "duplicate"),
        (lambda: np.var(a, mean=np.zeros(4)), TypeError, "mean"),
        (lambda: np.sum(a, where=np.ones(3, bool)), ValueError, "broadcast"),
        (lambda: np.sum(a, where=np.ones(4)), TypeError, "boolean"),
        (lambda: np.max(a, where=np.ones(4, bool)), ValueError, "initial"),
        (lambda: np.min(e, axis=0), ValueError, "zero-size"),
        (lambda: np.argmax(e), ValueError, "empty"),
        (lambda: np.argmax(a, axis=(0, 1)), TypeError, "axis"),
        (lambda: np.sum(a, out=np.zeros(4)), TypeError, "out"),
        (lambda: np.mean(a, dtype="U3"), TypeError, "mean"),
    ]
    for fn, exc, words in cases:
        comms = Comms()
        with intercept(comms), pytest.raises(exc, match=words) as info:
            fn()
        assert comms.calls == [], words
        assert len(set(team.allgather(str(info.value)))) == 1
    a.free()
    e.free()


def test_tuple_axes(team):
    ref = data((5, 6, 7), np.float64, 27)
    a = dist_array(ref, (ref.shape, (C, B, N), None))
    for axis in ((0, 1), (0, 2), (1, 2), (0, 1, 2), (-1, 0)):
        for keepdims in (False, True):
            for func in ("sum", "mean", "max", "any", "prod"):
                compare(getattr(np, func)(a, axis=axis, keepdims=keepdims),
                        getattr(np, func)(ref, axis=axis, keepdims=keepdims), ref.size, func)
    for axis, keepdims, func in (((0, 1), False, "var"), ((1, 2), True, "std"), ((-1, 0), False, "std")):
        compare(getattr(np, func)(a, axis=axis, keepdims=keepdims, ddof=1),
                getattr(np, func)(ref, axis=axis, keepdims=keepdims, ddof=1), ref.size, func)
    a.free()


@mpi_settings(10)
@given(st.data())
def test_blas_sums_match_numpy(team, monkeypatch, data_):
    """float64 sums and means along the first or last axis of a block go through BLAS (a
    matrix-vector product with ones) from ``reductions.GEMV_MIN`` elements on; here from 1, on
    random layouts, with infinities, NaNs and all-``-0.0`` rows, against NumPy."""
    from hpcsuite.pgas import reductions
    monkeypatch.setattr(reductions, "GEMV_MIN", 1)
    monkeypatch.setattr(reductions, "_blas_threads", lambda: 1)     # (taken only at 1 BLAS thread)
    lay = data_.draw(layouts(team.size, ndim=data_.draw(st.integers(2, 3))))
    ref = data(lay[0], np.float64, data_.draw(st.integers(0, 99)))
    if ref.size and data_.draw(st.booleans()):
        flat = ref.reshape(-1)
        flat[data_.draw(st.integers(0, ref.size - 1))] = data_.draw(st.sampled_from([np.inf, -np.inf, np.nan]))
        flat[data_.draw(st.integers(0, ref.size - 1))] = -0.0
    a = dist_array(ref, lay)
    axis = data_.draw(st.sampled_from([None, 0, ref.ndim - 1, -1]))
    func = data_.draw(st.sampled_from(["sum", "mean"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(np, func)(ref, axis=axis)
        got = getattr(np, func)(a, axis=axis)
    compare(got, want, ref.shape[0] if axis is None else ref.shape[axis], func)
    del got
    a.free()


def test_blas_sum_accuracy(team, monkeypatch):
    """The BLAS sum's error on a 600 x 600 block of random values (and of values around 1e8
    with small differences) measured against ``math.fsum``: the same order as NumPy's pairwise
    sum (both a few units of the last place of the row sum)."""
    import math
    from hpcsuite.pgas import reductions
    from hpcsuite.pgas.reductions import _gemv_sum
    if team.size > 1:
        pytest.skip("a local kernel: checked at one rank")
    monkeypatch.setattr(reductions, "_blas_threads", lambda: 1)
    rng = np.random.default_rng(7)
    for x in (rng.standard_normal((600, 600)), 1e8 + rng.standard_normal((600, 600))):
        for axis in (0, 1):
            exact = np.array([math.fsum(v) for v in (x.T if axis == 0 else x)])
            scale = np.abs(x).sum(axis=axis)
            err_blas = np.max(np.abs(_gemv_sum(x, axis).reshape(-1) - exact) / scale)
            err_numpy = np.max(np.abs(x.sum(axis=axis) - exact) / scale)
            eps = np.finfo(np.float64).eps
            # measured: blas 1e-16 .. 3e-16, NumPy 1e-16 .. 5e-16 of the sum of magnitudes
            assert err_blas <= max(4 * err_numpy, 8 * eps), (axis, err_blas, err_numpy)

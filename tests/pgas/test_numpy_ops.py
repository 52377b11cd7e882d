"""Operators and ufuncs on DistArrays against NumPy on the gathered arrays: random shapes,
distributions, process grids and dtypes at every rank count; operands in the same pattern work
without communication, other patterns are redistributed once (the smaller operand moves), NumPy
operands broadcast, out= and where=, in-place operators, temporaries freed, errors alike on every
rank before any communication."""
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcsuite import pgas
from hpcsuite.pgas import arith
from hpcsuite.runtime.comm_hooks import intercept

from numpy_layouts import (B, C, N, DTYPES, Comms, data, dist_array, gathered, layouts,
                           mpi_settings, tolerance)

pytestmark = pytest.mark.mpi


def check(got, want, dtype=None):
    got = gathered(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind in "fc":
        rtol, atol = tolerance(want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


# (name, function, which dtypes it applies to)
BINARY = [
    ("a+b", lambda a, b: a + b, "any"),
    ("a*2-b", lambda a, b: a * 2 - b, "num"),
    ("a/(|b|+1)", lambda a, b: a / (abs(b) + 1), "num"),
    ("a**2 + 3*b", lambda a, b: a ** 2 + 3 * b, "num"),
    ("a<b", lambda a, b: a < b, "any"),
    ("a==b", lambda a, b: a == b, "any"),
    ("a!=b", lambda a, b: a != b, "any"),
    ("a&b|~a", lambda a, b: (a & b) | ~a, "int"),
    ("a^b", lambda a, b: a ^ b, "int"),
    ("sqrt|a*2+b|", lambda a, b: np.sqrt(abs(a * 2 + b)), "num"),
    ("maximum", lambda a, b: np.maximum(a, b), "any"),
    ("-a", lambda a, b: -a + b, "num"),
    ("exp(a/9)", lambda a, b: np.exp(a / 9.0), "num"),
    ("divmod", lambda a, b: np.divmod(a, abs(b) + 1)[1], "num"),
]


def applies(kind, dtype):
    k = np.dtype(dtype).kind
    return kind == "any" or (kind == "num" and k != "b") or (kind == "int" and k in "biu")


@mpi_settings(8)
@given(st.data())
def test_elementwise_matches_numpy(team, data_):
    """Expressions of two DistArrays in random (often different) layouts and dtypes; the result
    has the pattern of the operand with the larger element size (the left one of equals)."""
    la = data_.draw(layouts(team.size), label="a")
    lb = data_.draw(layouts(team.size, shape=la[0], tile_ok=False), label="b")
    if data_.draw(st.booleans(), label="same layout"):
        lb = la
    da, db = data_.draw(st.sampled_from(DTYPES)), data_.draw(st.sampled_from(DTYPES))
    name, fn, kind = data_.draw(st.sampled_from(BINARY), label="op")
    if not (applies(kind, da) and applies(kind, db)):
        return
    ra, rb = data(la[0], da, 1), data(la[0], db, 2)
    a, b = dist_array(ra, la), dist_array(rb, lb)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(ra, rb)
        got = fn(a, b)
    check(got, want)
    ref = a if np.dtype(da).itemsize >= np.dtype(db).itemsize else b
    if name in ("a+b", "a<b", "maximum"):            # one ufunc: its result pattern is the rule's
        assert got.pattern == ref.pattern
    del got
    a.free()
    b.free()


@mpi_settings(4)
@given(st.data())
def test_numpy_and_scalar_operands_broadcast(team, data_):
    """NumPy arrays broadcast to the DistArray's shape (each rank takes its block), scalars
    broadcast with NumPy 2's promotion (Python scalars weak, NumPy scalars strong)."""
    la = data_.draw(layouts(team.size, ndim=data_.draw(st.integers(1, 3))))
    shape = la[0]
    dt = data_.draw(st.sampled_from((np.float64, np.float32, np.int32)))
    ra = data(shape, dt, 3)
    a = dist_array(ra, la)
    # a trailing row, a column over dimension 0, a full array, a 0-d array
    nd = len(shape)
    ops = [data(shape[-1:], np.float64, 4), data(shape[:1] + (1,) * (nd - 1), np.int32, 5),
           data(shape, np.float32, 6), np.array(2.5), np.float32(1.5), 3, 2.0]
    for x in ops:
        check(a + x, ra + x)
        check(x * a, x * ra)
        check(np.subtract(x, a), np.subtract(x, ra))
    a.free()


@mpi_settings(3)
@given(st.data())
def test_inplace_operators_keep_the_pattern(team, data_):
    la = data_.draw(layouts(team.size))
    lb = data_.draw(layouts(team.size, shape=la[0], tile_ok=False))
    ra, rb = data(la[0], np.float64, 7), data(la[0], np.float32, 8)
    a, b = dist_array(ra, la), dist_array(rb, lb)
    pattern = a.pattern
    a += b
    ra += rb
    a *= 2
    ra *= 2
    a -= rb                       # a NumPy operand
    ra -= rb
    a /= (abs(b) + 1)
    ra /= (abs(rb) + 1)
    assert a.pattern == pattern
    check(a, ra)
    i = dist_array(data(la[0], np.int64, 9), la)
    ri = data(la[0], np.int64, 9)
    i //= 2
    ri //= 2
    i |= 5
    ri |= 5
    i <<= 1
    ri <<= 1
    check(i, ri)
    with pytest.raises(TypeError, match="add"):
        i += 0.5                  # NumPy's casting rule: float into int out raises
    a.free()
    b.free()
    i.free()


@mpi_settings(3)
@given(st.data())
def test_out_and_where(team, data_):
    """out= in a third layout (the result takes out's pattern), where= as a DistArray, a NumPy
    array or a scalar: elements where it is false keep out's values."""
    la = data_.draw(layouts(team.size))
    lb = data_.draw(layouts(team.size, shape=la[0], tile_ok=False))
    lo = data_.draw(layouts(team.size, shape=la[0], tile_ok=False))
    ra, rb, ro = data(la[0], np.float64, 10), data(la[0], np.float64, 11), data(la[0], np.float64, 12)
    mask = data(la[0], np.bool_, 13)
    a, b, o = dist_array(ra, la), dist_array(rb, lb), dist_array(ro, lo)
    m = dist_array(mask, lb)
    for where in (m, mask, True, False):
        rw = mask if where is m else where
        r = np.add(a, b, out=o, where=where)
        assert r is o
        want = ro.copy()
        np.add(ra, rb, out=want, where=rw)
        check(o, want)
        ro = want
    q, rem = np.divmod(a, abs(b) + 1, out=(o, dist_array(ra, lo)))
    check(q, np.divmod(ra, abs(rb) + 1)[0])
    check(rem, np.divmod(ra, abs(rb) + 1)[1])
    rem.free()
    for x in (a, b, o, m):
        x.free()


def test_same_pattern_is_local_and_other_patterns_move_once(team, monkeypatch):
    """A chain over same-pattern operands (and NumPy operands) makes no communication call at all;
    an operand in another pattern is redistributed once, and it is the smaller one."""
    ra, rb = data((23, 7), np.float64, 14), data((23, 7), np.float32, 15)
    a = dist_array(ra, ((23, 7), (B, N), None))
    b = dist_array(rb, ((23, 7), (B, N), None))
    c32 = dist_array(rb, ((23, 7), (C, N), None))
    warm = np.sqrt(abs(a * 2 + b - ra[0]))               # pools the temporaries' memory
    del warm
    comms = Comms()
    with intercept(comms):
        r = np.sqrt(abs(a * 2 + b - ra[0]))
        s = r.sum(axis=1)                            # axis 1 is not distributed: local too
    assert comms.calls == []
    check(r, np.sqrt(abs(ra * 2 + rb - ra[0])))
    check(s, np.sqrt(abs(ra * 2 + rb - ra[0])).sum(axis=1))
    moved = []
    real = arith.redistribute
    monkeypatch.setattr(arith, "redistribute", lambda src, dst: (moved.append(src), real(src, dst)))
    r2 = c32 + a                                     # c32 (float32) is smaller: it moves to a's pattern
    assert r2.pattern == a.pattern
    assert moved == ([c32] if team.size > 1 else [])  # (one unit: CYCLIC is BLOCKED, nothing moves)
    check(r2, rb + ra)
    for x in (a, b, c32):
        x.free()


def test_results_are_freed_when_dropped(team):
    """Dropped results are released at the team's next collective point (pgas.lifetime): a chain
    of operators leaves only its result (temporaries reused in place or released), and
    pgas.collect() releases everything dropped."""
    ra = data((40, 3), np.float64, 16)
    a = dist_array(ra, ((40, 3), (C, N), None))
    b = dist_array(ra, ((40, 3), (B, N), None))
    pgas.collect(team)
    live = pgas.live_segments()
    for _ in range(3):
        r = ((a * 2 + b) / 3 - a) ** 2
        pgas.collect(team)
        assert pgas.live_segments() == live + 1
        del r
    pgas.collect(team)
    assert pgas.live_segments() == live
    keep = a + 1
    keep.free()                                      # an explicit free stays allowed (idempotent)
    del keep
    pgas.collect(team)
    assert pgas.live_segments() == live
    a.free()
    b.free()


def test_temporaries_are_reused_like_numpy(team):
    """A temporary operand of an operator (nothing else refers to it) takes the result in place,
    as NumPy's temporary elision: ((a*2 + b)*3 - a)/2 makes one array, the result, where NumPy
    makes one too; an operand the caller holds is never written; a result of another dtype or
    pattern gets a new array."""
    ra, rb = data((30, 4), np.float64, 30), data((30, 4), np.float64, 31)
    a = dist_array(ra, ((30, 4), (B, N), None))
    b = dist_array(rb, ((30, 4), (B, N), None))
    c = dist_array(rb, ((30, 4), (C, N), None))
    pgas.collect(team)
    live = pgas.live_segments()
    r = ((a * 2 + b) * 3 - a) / 2
    assert pgas.live_segments() == live + 1          # nothing queued, nothing else made
    check(r, ((ra * 2 + rb) * 3 - ra) / 2)
    del r
    t = a * 2                                        # held by the caller: not reused
    u = t + b
    v = -t
    w = 1 - (a * 2)                                  # reflected and unary forms reuse temporaries
    assert u is not t and v is not t
    check(t, ra * 2)
    check(u, ra * 2 + rb)
    check(v, -(ra * 2))
    check(w, 1 - ra * 2)
    check((a * 2) < b, ra * 2 < rb)                  # bool result: a new array
    x = c + (a * 2)                                  # result in c's pattern (leftmost of equals)
    assert x.pattern == c.pattern
    check(x, rb + ra * 2)
    del t, u, v, w, x
    pgas.collect(team)
    assert pgas.live_segments() == live
    for z in (a, b, c):
        z.free()


def test_broadcast_between_distarrays(team):
    """A DistArray with size-1 or missing leading axes broadcasts against one of the full shape
    when its blocks line up (the result is not split along the broadcast axes and the operand is
    distributed like it along the others): local, no communication. Otherwise a TypeError naming
    the case, alike on every rank, before any communication."""
    P = team.size
    ra = data((6, 4 * P + 1, 5), np.float64, 32)
    a = dist_array(ra, (ra.shape, (N, B, N), None))            # grid (1, P, 1)
    plane = ra[0]                                               # (4P+1, 5): missing axis 0
    row = ra[:1]                                                # (1, 4P+1, 5): size-1 axis 0
    col = ra[:1, :, :1]                                         # (1, 4P+1, 1)
    xp = dist_array(plane, (plane.shape, (B, N), None))
    xr = dist_array(row, (row.shape, (N, B, N), None))
    xc = dist_array(col, (col.shape, (N, B, N), None))
    for x, rx in ((xp, plane), (xr, row), (xc, col)):
        warm = (a * x, x - a, np.maximum(a, x))                 # pools the results' memory
        del warm
        comms = Comms()
        with intercept(comms):
            r = a * x
            s = x - a
            a2 = np.maximum(a, x)
        assert comms.calls == []
        assert r.pattern == a.pattern
        check(r, ra * rx)
        check(s, rx - ra)
        check(a2, np.maximum(ra, rx))
        check(np.where(a > 0, x, 0.0), np.where(ra > 0, rx, 0.0))
        del r, s, a2
    o = dist_array(ra, (ra.shape, (N, B, N), None))
    o += xc                                                     # in place, into the full array
    check(o, ra + col)
    bad = [
        (lambda: dist_array(ra, (ra.shape, (B, N, N), None)) * xr, "dimension 0 is split"),
        (lambda: a * dist_array(plane, (plane.shape, (C, N), None)), "distributed as"),
        (lambda: xc + dist_array(ra[:, :1], ((6, 1, 5), (B, N, N), None)), "none of them has the result"),
    ]
    if P == 1:
        bad = bad[2:]
    for fn, words in bad:
        comms = Comms()
        with pytest.raises(TypeError, match=words) as info:
            fn()
        assert len(set(team.allgather(str(info.value)))) == 1
    with pytest.raises(ValueError, match="do not broadcast"):
        a + dist_array(ra[:, :2], ((6, 2, 5), (N, B, N), None))
    pgas.collect(team)
    for z in (a, xp, xr, xc, o):
        z.free()


def test_bad_operands_raise_alike_before_communicating(team):
    a = pgas.zeros((10, 4), dist=(B, N))
    b = pgas.zeros((10, 5), dist=(B, N))
    f = pgas.zeros((10, 4), dist=(B, N))
    cases = [
        (lambda: a + b, ValueError, "do not broadcast"),
        (lambda: a + np.ones(3), ValueError, "does not broadcast"),
        (lambda: np.add(a, f, order="F"), TypeError, "order"),
        (lambda: np.add(a, f, extobj=None), TypeError, "extobj"),
        (lambda: np.bitwise_and(a, f), TypeError, "bitwise_and"),
        (lambda: a + "x", TypeError, "str"),
        (lambda: np.add(a, f, out=np.empty((10, 4))), TypeError, "out"),
        (lambda: np.add.outer(a, f), TypeError, "outer"),
        (lambda: np.subtract.reduce(a), TypeError, "subtract"),
        (lambda: bool(a), ValueError, "ambiguous"),
    ]
    for fn, exc, words in cases:
        comms = Comms()
        with intercept(comms), pytest.raises(exc, match=words) as info:
            fn()
        assert comms.calls == [], (words, comms.calls)
        assert len(set(team.allgather(str(info.value)))) == 1       # the same message everywhere
    for x in (a, b, f):
        x.free()

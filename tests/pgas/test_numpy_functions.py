"""NumPy functions on DistArrays besides ufuncs and reductions: transpose / .T, ``@`` through
SUMMA, reshape where the layout allows, concatenate along an undistributed axis, where, clip,
astype, copy, *_like; unsupported functions raise TypeError naming them (no gather); the array API
namespace runs array-API code written for NumPy. Against NumPy on the gathered arrays."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcsuite import pgas
from hpcsuite.runtime.comm_hooks import intercept

from numpy_layouts import B, BC, C, N, Comms, data, dist_array, gathered, layouts, mpi_settings, tolerance

pytestmark = pytest.mark.mpi


def check(got, want):
    got = gathered(got)
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind in "fc":
        rtol, atol = tolerance(want.dtype, 64)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def test_issue_examples(team):
    """The issue's "done when": np.sqrt(a * 2 + b).sum(axis=0) and (a.T @ b).max()."""
    ra, rb = data((29, 11), np.float64, 31, low=0, high=4), data((29, 11), np.float64, 32, low=0, high=4)
    a = dist_array(ra, (ra.shape, (B, B), None))
    b = dist_array(rb, (rb.shape, (C, N), None))
    check(np.sqrt(a * 2 + b).sum(axis=0), np.sqrt(ra * 2 + rb).sum(axis=0))
    got = (a.T @ b).max()
    want = (ra.T @ rb).max()
    np.testing.assert_allclose(got, want, rtol=1e-13)      # 29-term dot products, reordered
    assert len(set(team.allgather(float(got)))) == 1
    a.free()
    b.free()


@mpi_settings(6)
@given(st.data())
def test_transpose_matches_numpy(team, data_):
    lay = data_.draw(layouts(team.size), label="layout")
    nd = len(lay[0])
    perm = data_.draw(st.permutations(range(nd)), label="axes")
    ref = data(lay[0], np.float32, 33)
    a = dist_array(ref, lay)
    t = np.transpose(a, perm)
    check(t, np.transpose(ref, perm))
    assert t.dist == tuple(a.dist[k] for k in perm)
    check(a.T, ref.T)
    check(a.transpose(), ref.transpose())
    del t
    a.free()


@mpi_settings(4)
@given(st.data())
def test_matmul_matches_numpy(team, data_):
    m, k, n = (data_.draw(st.integers(1, 9)) for _ in range(3))
    la = data_.draw(layouts(team.size, shape=(m, k), tile_ok=False), label="A")
    lb = data_.draw(layouts(team.size, shape=(k, n), tile_ok=False), label="B")
    dt = data_.draw(st.sampled_from((np.float64, np.int64)), label="dtype")
    ra, rb = data((m, k), dt, 34), data((k, n), dt, 35)
    a, b = dist_array(ra, la), dist_array(rb, lb)
    check(a @ b, ra @ rb)
    check(np.matmul(a, b), ra @ rb)
    a.free()
    b.free()


def test_gram_matrix_of_row_distributed_arrays(team):
    """x.T @ y with x, y split alike along rows (the inner dimension): local products and one
    reduce-scatter of their row blocks (one Alltoallv: no SUMMA panels, no Allreduce of the whole
    product), the result's rows BLOCKED."""
    for dist in ((B, N), (C, N), (BC(3), N)):
        rx, ry = data((37, 6), np.float64, 44), data((37, 4), np.float64, 45)
        x, y = dist_array(rx, (rx.shape, dist, None)), dist_array(ry, (ry.shape, dist, None))
        comms = Comms()
        with intercept(comms):
            g = x.T @ y
        check(g, rx.T @ ry)
        if team.size > 1:
            assert comms.calls == ["Alltoallv"], comms.calls
            assert g.dist == (B, N)
        del g
        x.free()
        y.free()


def test_reshape_where_the_layout_allows(team):
    ref = data((6, 4, 5), np.int32, 36)
    a = dist_array(ref, (ref.shape, (B, N, N), None))
    for shape in ((6, 20), (6, -1), (6, 2, 10), (6, 4, 5, 1)):
        r = a.reshape(shape)
        check(r, ref.reshape(shape))
        assert r.dist[0] == B
    check(np.reshape(a, (6, 20)), ref.reshape(6, 20))
    with pytest.raises(ValueError, match="move elements between ranks"):
        a.reshape((120,))
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape((7, -1))
    b = dist_array(ref, (ref.shape, (B, C, N), None))
    with pytest.raises(ValueError, match="move elements"):
        b.reshape((6, 2, 2, 5))                     # dimension 1 is CYCLIC: distributed
    check(b.reshape((6, 4, 5, 1)), ref.reshape(6, 4, 5, 1))
    a.free()
    b.free()


def test_concatenate_along_an_undistributed_axis(team):
    r1, r2, r3 = (data((9, w), np.float64, 37 + w) for w in (3, 1, 4))
    a = dist_array(r1, (r1.shape, (B, N), None))
    b = dist_array(r2, (r2.shape, (C, N), None))            # another layout: redistributed once
    c = dist_array(r3, (r3.shape, (B, N), None))
    check(np.concatenate([a, b, c], axis=1), np.concatenate([r1, r2, r3], axis=1))
    check(np.concatenate((a, c), axis=-1), np.concatenate((r1, r3), axis=-1))
    if team.size > 1:
        with pytest.raises(ValueError, match="distributed"):
            np.concatenate([a, a], axis=0)
    with pytest.raises(TypeError, match="axis=None"):
        np.concatenate([a, c], axis=None)
    for x in (a, b, c):
        x.free()


@mpi_settings(4)
@given(st.data())
def test_where_clip_astype_copy_like(team, data_):
    la = data_.draw(layouts(team.size), label="a")
    lb = data_.draw(layouts(team.size, shape=la[0], tile_ok=False), label="b")
    ra, rb = data(la[0], np.float64, 41), data(la[0], np.int32, 42)
    a, b = dist_array(ra, la), dist_array(rb, lb)
    check(np.where(a > 0, a, b), np.where(ra > 0, ra, rb))
    check(np.where(a > 0, 1.0, b), np.where(ra > 0, 1.0, rb))
    check(np.where(ra > 0, a, 0), np.where(ra > 0, ra, 0))       # a NumPy condition
    check(np.clip(a, -2, 3), np.clip(ra, -2, 3))
    check(a.clip(min=-1.5), np.clip(ra, -1.5, None))
    check(np.clip(a, b, 4), np.clip(ra, rb, 4))
    check(a.astype(np.int16), ra.astype(np.int16))
    check(b.astype(np.float32), rb.astype(np.float32))
    assert a.astype(np.float64, copy=False) is a
    c = a.copy()
    check(c, ra)
    c += 1                                       # a copy, not a view
    check(a, ra)
    check(np.copy(b), rb)
    check(np.zeros_like(a), np.zeros_like(ra))
    check(np.full_like(b, 7), np.full_like(rb, 7))
    assert np.ones_like(a).pattern == a.pattern
    del c
    a.free()
    b.free()


def test_unsupported_functions_raise_type_error_naming_them(team):
    a = pgas.zeros((8, 3), dist=(B, N))
    cases = [(lambda: np.linalg.norm(a), "numpy.linalg.norm"), (lambda: np.sort(a), "numpy.sort"),
             (lambda: np.dot(a, a), "numpy.dot"), (lambda: np.unique(a), "numpy.unique"),
             (lambda: np.fft.fft(a), "numpy.fft.fft"), (lambda: np.asarray(a), "to_numpy"),
             (lambda: np.median(a), "numpy.median"), (lambda: np.add.at(a, [0], 1), "at")]
    for fn, name in cases:
        comms = Comms()
        with intercept(comms), pytest.raises(TypeError, match=name.replace(".", r"\.")):
            fn()
        assert comms.calls == [], name
    a.free()


def array_api_energy(x):
    """Array-API code as the LES and solvers write it (works on NumPy 2 and on DistArrays)."""
    xp = x.__array_namespace__()
    e = xp.sqrt(x * x + 1.0)
    col = xp.sum(e, axis=0)
    return xp.max(col) / xp.mean(e), xp.argmax(xp.abs(x)), xp.matmul(xp.matrix_transpose(x), x)


def test_array_api_namespace_runs_array_api_code(team):
    ref = data((13, 4), np.float64, 43)
    a = dist_array(ref, (ref.shape, (C, N), None))
    got, want = array_api_energy(a), array_api_energy(ref)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    assert got[1] == want[1]
    check(got[2], want[2])
    xp = a.__array_namespace__()
    assert xp.__array_api_version__ == "2023.12"
    z = xp.zeros((10, 2), dtype=xp.float32)
    assert z.dtype == np.float32 and z.dist[0] == B
    check(xp.asarray(np.arange(6.0)) * 2, np.arange(6.0) * 2)
    check(xp.concat([a, a], axis=1), np.concatenate([ref, ref], axis=1))
    check(xp.permute_dims(a, (1, 0)), ref.T)
    check(xp.astype(a, xp.int64), ref.astype(np.int64))
    check(xp.clip(a, min=0), np.clip(ref, 0, None))
    check(xp.where(a > 0, a, -a), np.abs(ref))
    assert xp.isdtype(a.dtype, "real floating")
    with pytest.raises(AttributeError, match="no 'linalg'"):
        xp.linalg
    with pytest.raises(AttributeError, match="no 'unique_values'"):
        xp.unique_values(a)
    a.free()

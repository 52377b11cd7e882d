"""NumPy on DistArrays with device="gpu": results stay on the device (CuPy local blocks), NumPy
operands are copied to the device, same-pattern operations move nothing between host and device;
reductions, transpose, @, where/clip/astype and the namespace against NumPy on the gathered arrays.
Skipped where no GPU is usable; on CPU-only machines run with the CuPy stand-in
(``PYTHONPATH=tests/fakegpu``, as scripts/run_tests.sh's GPU stage does)."""
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.runtime import gpu_status

from numpy_layouts import B, BC, C, N, data, tolerance

ok, why = gpu_status()
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not ok, reason=f"no GPU: {why}")]


def on_gpu(ref, dist, grid=None):
    return pgas.from_numpy(ref, dist=dist, grid=grid, root=None, device="gpu")


def check(got, want):
    got = got.to_numpy() if isinstance(got, pgas.DistArray) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    rtol, atol = tolerance(want.dtype, 64) if want.dtype.kind in "fc" else (0, 0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def transfers():
    """Host <-> device copies so far (the stand-in records them; a real CuPy does not)."""
    import cupy
    core = getattr(cupy, "_core", None)
    return list(getattr(core, "transfers", [])) if core is not None else None


def test_gpu_elementwise_stays_on_the_device(team):
    import cupy
    ra, rb = data((21, 6), np.float64, 51), data((21, 6), np.float32, 52)
    a, b = on_gpu(ra, (B, N)), on_gpu(rb, (B, N))
    r = np.sqrt(abs(a * 2 + b)) - 1.0
    r.local                                          # warm: the pooled result
    before = transfers()
    r = np.sqrt(abs(a * 2 + b)) - 1.0
    if before is not None:
        assert transfers() == before                 # same pattern: nothing crossed host <-> device
    assert isinstance(r.local, cupy.ndarray) and r.device.is_gpu
    check(r, np.sqrt(abs(ra * 2 + rb)) - 1.0)
    row = data((6,), np.float64, 53)
    check(a + row, ra + row)                        # a NumPy operand: its block goes to the device
    c = on_gpu(rb, (C, N))                          # another pattern: redistributed on the way
    check(a - c, ra - rb)
    a += c
    check(a, ra + rb)
    assert isinstance(a.local, cupy.ndarray)
    m = np.add(a, b, out=on_gpu(ra, (B, N)), where=a > 0)
    want = ra.copy()
    np.add(ra + rb, rb, out=want, where=(ra + rb) > 0)
    check(m, want)
    for x in (a, b, c, m):
        x.free()


def test_gpu_reductions_and_functions(team):
    import cupy
    ref = data((14, 9), np.float64, 54)
    a = on_gpu(ref, (BC(2), B), grid=(0, 0))
    for func in ("sum", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all", "prod"):
        for axis in (None, 0, 1):
            got = getattr(np, func)(a, axis=axis)
            if isinstance(got, pgas.DistArray):
                assert isinstance(got.local, cupy.ndarray), func
            else:
                assert isinstance(got, (np.generic, bool, np.ndarray)), (func, type(got))
            check(got, getattr(np, func)(ref, axis=axis))
    check(a.T, ref.T)
    prod = a.T @ a                                  # SUMMA (host), the result on the device
    assert isinstance(prod.local, cupy.ndarray)
    check(prod, ref.T @ ref)
    check(np.where(a > 0, a, 0.0), np.where(ref > 0, ref, 0.0))
    check(np.clip(a, -1, 1), np.clip(ref, -1, 1))
    check(a.astype(np.float32), ref.astype(np.float32))
    rows = on_gpu(ref, (B, N))
    check(np.concatenate([rows, a], axis=1), np.concatenate([ref, ref], axis=1))
    gram = rows.T @ rows                            # the inner dimension split: one Allreduce
    assert isinstance(gram.local, cupy.ndarray)
    check(gram, ref.T @ ref)
    rows.free()
    xp = a.__array_namespace__()
    check(xp.sum(xp.sqrt(xp.abs(a)), axis=1), np.sqrt(np.abs(ref)).sum(axis=1))
    with pytest.raises(TypeError, match="GPU"):
        np.cumsum(a, axis=0)
    a.free()


def test_gpu_broadcast_elision_and_masked_reductions(team):
    """Local broadcasting between DistArrays, reused temporaries, var/std over several axes and
    where= reductions keep GPU blocks on the device."""
    import cupy
    ref = data((5, 3 * team.size + 1, 4), np.float64, 55)
    a = on_gpu(ref, (N, B, N))
    plane = on_gpu(ref[0], (B, N))
    r = (a * 2 + plane) - 1.0                       # one array: the temporary takes the result
    assert isinstance(r.local, cupy.ndarray)
    check(r, ref * 2 + ref[0] - 1.0)
    for axis in ((0, 2), (0, 1), (1, 2)):
        got = np.var(a, axis=axis, ddof=1)
        assert isinstance(got.local, cupy.ndarray)
        check(got, np.var(ref, axis=axis, ddof=1))
    mask = ref > -6                                 # (no row masked out entirely)
    for func in ("sum", "mean", "any"):
        got = getattr(np, func)(a, axis=1, where=mask)
        assert isinstance(got.local, cupy.ndarray)
        check(got, getattr(np, func)(ref, axis=1, where=mask))
    check(np.max(a, where=mask, initial=-10.0), np.max(ref, where=mask, initial=-10.0))
    got = np.std(a, axis=(0, 2), where=mask)
    assert isinstance(got.local, cupy.ndarray)
    check(got, np.std(ref, axis=(0, 2), where=mask))
    del r, got
    for x in (a, plane):
        x.free()

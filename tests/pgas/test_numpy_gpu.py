"""NumPy on DistArrays with device="gpu": results stay on the device (CuPy local blocks), NumPy
operands are copied to the device, same-pattern operations move nothing between host and device;
reductions, transpose, @, where/clip/astype, scans and the namespace against NumPy on the gathered
arrays.
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
    c = np.cumsum(a, axis=0)                        # scans stay on the device (below: every case)
    assert isinstance(c.local, cupy.ndarray)
    check(c, np.cumsum(ref, axis=0))
    del c
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


def identity(fn, dt):
    """What an exclusive scan starts with (pgas.scan's documented identities)."""
    big = np.inf if dt.kind == "f" else np.iinfo(dt).max
    return {np.add: 0, np.multiply: 1, np.minimum: big, np.maximum: -big if dt.kind == "f"
            else np.iinfo(dt).min}[fn]


def exclusive_ref(acc, first, axis):
    """The exclusive scan from NumPy's inclusive one: ``first``, then ``acc`` shifted along ``axis``."""
    head = np.full_like(np.take(acc, [0], axis=axis), first)
    return np.concatenate([head, np.take(acc, np.arange(acc.shape[axis] - 1), axis=axis)], axis=axis)


def test_gpu_scans_stay_on_the_device(team):
    """pgas.scan / cumsum / numpy.cumsum / cumprod / ufunc.accumulate on GPU arrays: 1-D BLOCKED and
    BLOCKCYCLIC, 2-D along each axis (one axis distributed: through a temporary), sum / prod / min /
    max, inclusive and exclusive. Integers bit-identical to NumPy; floats as the CPU scan tests
    (rtol 1e-12, atol 1e-9), and equal to the CPU DistArray's scan. Results have CuPy blocks; a
    "sum" scan moves only block totals and prefixes between host and device."""
    import cupy
    rng = np.random.default_rng(57)
    n = 9 * team.size + 5
    ri = rng.choice(np.array([-2, -1, 1, 2], dtype=np.int64), n)      # products stay in int64
    rf = rng.standard_normal(n)
    ops = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
    for dist in (B, BC(2)):
        a = on_gpu(ri, (dist,))
        for op, fn in ops.items():
            for excl in (False, True):
                before = transfers()
                r = pgas.scan(a, op, exclusive=excl)
                assert isinstance(r.local, cupy.ndarray) and r.device.is_gpu and r.pattern == a.pattern
                if op == "sum" and before is not None:   # on the device: only totals and prefixes
                    moved = transfers()[len(before):]
                    assert moved and max(b for _, b in moved) < a.local.nbytes, moved   # no block
                acc = fn.accumulate(ri)
                want = exclusive_ref(acc, identity(fn, acc.dtype), 0) if excl else acc
                got = r.to_numpy()
                assert got.dtype == want.dtype and np.array_equal(got, want), (dist, op, excl)
                r.free()
        check(np.cumsum(a), np.cumsum(ri))
        check(np.cumprod(a), np.cumprod(ri))
        check(np.minimum.accumulate(a), np.minimum.accumulate(ri))
        assert isinstance(np.maximum.accumulate(a).local, cupy.ndarray)
        a.free()
        f, cpu = on_gpu(rf, (dist,)), pgas.from_numpy(rf, dist=(dist,), root=None)
        for op in ("sum", "prod", "max"):
            g, c = pgas.scan(f, op, exclusive=True), pgas.scan(cpu, op, exclusive=True)
            assert isinstance(g.local, cupy.ndarray)
            np.testing.assert_allclose(g.to_numpy(), c.to_numpy(), rtol=1e-12, atol=1e-9)
            g.free(), c.free()
        got = pgas.cumsum(f)
        np.testing.assert_allclose(got.to_numpy(), np.cumsum(rf), rtol=1e-12, atol=1e-9)
        assert pgas.cumsum(f, out=cpu) is cpu            # into a CPU array: via a device temporary
        np.testing.assert_allclose(cpu.to_numpy(), np.cumsum(rf), rtol=1e-12, atol=1e-9)
        got.free(), f.free(), cpu.free()
    ref = rng.integers(-3, 4, (7, 2 * team.size + 3))
    for dist in ((B, N), (N, BC(2))):
        m = on_gpu(ref, dist)
        for axis in (0, 1):
            for op, fn in ops.items():
                excl = (axis + len(op)) % 2 == 1          # each op both ways over the two axes
                r = pgas.scan(m, op, exclusive=excl, axis=axis)
                assert isinstance(r.local, cupy.ndarray)
                acc = fn.accumulate(ref, axis=axis)
                want = exclusive_ref(acc, identity(fn, acc.dtype), axis) if excl else acc
                got = r.to_numpy()
                assert got.dtype == want.dtype and np.array_equal(got, want), (dist, axis, op, excl)
                r.free()
        check(np.cumsum(m, axis=1), np.cumsum(ref, axis=1))
        check(np.maximum.accumulate(m, axis=0), np.maximum.accumulate(ref, axis=0))
        check(m.__array_namespace__().cumulative_sum(m, axis=0), np.cumsum(ref, axis=0))
        m.free()

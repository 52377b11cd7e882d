"""Temporally blocked stencil kernels (hpcsuite.accel.temporal) against T single sweeps, bit for bit:
random fields, uneven shapes, T = 1..5, fixed (Dirichlet-like) and shrinking (deep-halo) sides,
tile widths from 1 to wider than the region, float32 and float64; against an independent np.roll
reference; the portable and strict array-API paths; argument checks; the CUDA 2.5-D kernels run
through g++ and, on a GPU or the CuPy stand-in, through CuPy."""
import itertools
import shutil

import numpy as np
import pytest

from cuda_emulation import compile_for_cpu, parse_kernels
from hpcsuite.accel import get_backend, kernels, temporal
from hpcsuite.runtime import gpu_status

C7 = (0.4, 0.1, 0.12, 0.08)
W27 = (0.3, 0.05, 0.025, 0.0125)
SENTINEL = -7.0


def step_regions(shape, T, fixed):
    """T nested regions: side (d, lo/hi) fixed at the array's edge layer when ``fixed[2 d + hi]``,
    else shrinking by one cell per step so that the last step covers [T, n - T)."""
    regs = []
    for s in range(T):
        m = T - 1 - s                      # cells still to be used up after this step
        regs.append(tuple((1 if fixed[2 * d] else T - m, shape[d] - 1 if fixed[2 * d + 1] else shape[d] - T + m)
                          for d in range(3)))
    return regs


def single_sweeps(u, kind, regs):
    """T calls of the single-sweep kernel on two arrays that both start as u (the deep-halo
    solver's ping-pong): the result of the last step, and the array it is in."""
    a, b = u.copy(), u.copy()
    for reg in regs:
        if kind == "7":
            kernels.stencil7(a, b, *C7, reg)
        else:
            kernels.stencil27(a, b, W27, reg)
        a, b = b, a
    return a


def blocked(u, kind, regs, out=None, **kw):
    out = np.full(u.shape, SENTINEL, dtype=u.dtype) if out is None else out
    if kind == "7":
        temporal.stencil7_steps(u, out, *C7, regs, **kw)
    else:
        temporal.stencil27_steps(u, out, W27, regs, **kw)
    return out


def roll_steps(u, kind, regs):
    """Independent reference: each step over the whole array with np.roll, then only the step's
    region kept (cells outside keep their values), in float64."""
    a = u.astype(np.float64)
    for reg in regs:
        sh = lambda o: np.roll(a, [-x for x in o], axis=(0, 1, 2))   # noqa: E731 - sh(o)[i] = a[i + o]
        if kind == "7":
            new = C7[0] * a + sum(C7[d + 1] * (sh(e) + sh(tuple(-x for x in e)))
                                  for d, e in enumerate(((1, 0, 0), (0, 1, 0), (0, 0, 1))))
        else:
            new = W27[0] * a
            for o in itertools.product((-1, 0, 1), repeat=3):
                if any(o):
                    new = new + W27[sum(map(abs, o))] * sh(o)
        sl = tuple(slice(x, y) for x, y in reg)
        a = a.copy()
        a[sl] = new[sl]
    return a


FIXED = [(0,) * 6, (1,) * 6, (1, 0, 0, 1, 1, 0), (0, 1, 1, 0, 0, 1)]


@pytest.mark.parametrize("kind", ["7", "27"])
def test_blocked_equals_single_sweeps_bit_for_bit(kind):
    rng = np.random.default_rng(3)
    for shape in [(13, 11, 9), (9, 20, 17), (16, 7, 33)]:
        u = rng.standard_normal(shape)
        for T, fixed in itertools.product((1, 2, 3, 5), FIXED):
            if any(n - 2 * T <= 0 for n in shape):
                continue
            regs = step_regions(shape, T, fixed)
            ref = single_sweeps(u, kind, regs)
            last = tuple(slice(a, b) for a, b in regs[-1])
            for tile in (1, 3, 16, 64):
                out = blocked(u, kind, regs, tile=tile)
                assert np.array_equal(out[last], ref[last]), (shape, T, fixed, tile)
                outside = np.ones(shape, bool)
                outside[last] = False
                assert np.all(out[outside] == SENTINEL)            # nothing written outside R_{T-1}


@pytest.mark.parametrize("kind", ["7", "27"])
def test_blocked_against_roll_reference(kind):
    u = np.random.default_rng(4).standard_normal((12, 10, 14))
    for fixed in FIXED[:3]:
        regs = step_regions(u.shape, 4, fixed)
        out = blocked(u, kind, regs, tile=4)
        ref = roll_steps(u, kind, regs)
        last = tuple(slice(a, b) for a, b in regs[-1])
        # a different order of the neighbour sums (np.roll, whole array): rounding only;
        # measured differences <= 4e-16 on fields of unit size
        np.testing.assert_allclose(out[last], ref[last], rtol=0, atol=1e-14)


@pytest.mark.parametrize("kind", ["7", "27"])
def test_float32_and_noncontiguous_output(kind):
    u = np.random.default_rng(5).standard_normal((10, 12, 11)).astype(np.float32)
    regs = step_regions(u.shape, 3, (1, 0, 0, 1, 0, 0))
    ref = single_sweeps(u, kind, regs)
    last = tuple(slice(a, b) for a, b in regs[-1])
    out = blocked(u, kind, regs, tile=5)
    assert out.dtype == np.float32 and np.array_equal(out[last], ref[last])
    big = np.full((10, 12, 22), SENTINEL, dtype=np.float32)
    view = big[:, :, ::2]                                         # not C-contiguous
    blocked(u[:, :, :], kind, regs, out=view, tile=5)
    assert np.array_equal(view[last], ref[last])
    assert np.all(big[:, :, 1::2] == SENTINEL)


@pytest.mark.parametrize("kind", ["7", "27"])
def test_portable_and_strict_paths(kind):
    u = np.random.default_rng(6).standard_normal((9, 10, 8))
    regs = step_regions(u.shape, 3, (0, 1, 1, 0, 0, 0))
    last = tuple(slice(a, b) for a, b in regs[-1])
    ref = single_sweeps(u, kind, regs)
    port = blocked(u, kind, regs, impl="portable")
    assert np.array_equal(port[last], ref[last])
    be = get_backend("strict")
    du, dout = be.asarray(u), be.full(u.shape, SENTINEL)
    with be.data_region() as moved:
        if kind == "7":
            temporal.stencil7_steps(du, dout, *C7, regs, backend=be)
        else:
            temporal.stencil27_steps(du, dout, W27, regs, backend=be)
    assert moved.transfers == 0
    assert np.array_equal(be.to_host(dout)[last], ref[last])


def test_bad_arguments():
    u, out = np.zeros((8, 8, 8)), np.zeros((8, 8, 8))
    good = step_regions(u.shape, 2, (0,) * 6)
    cases = [
        (lambda: temporal.stencil7_steps(u, out, *C7, []), "at least one"),
        (lambda: temporal.stencil7_steps(u, out, *C7, 5), "sequence of regions"),
        (lambda: temporal.stencil7_steps(u, out, *C7, good[::-1]), "does not follow"),
        # a side that stays put after having moved (not a fixed boundary, not a shrinking halo)
        (lambda: temporal.stencil7_steps(u, out, *C7, [((1, 7),) * 3, ((2, 7),) * 3, ((2, 6),) * 3]),
         "does not follow"),
        (lambda: temporal.stencil7_steps(u, out, *C7, [((0, 7),) * 3]), "reaches outside"),
        (lambda: temporal.stencil7_steps(u, out, *C7, good, tile=0), "tile must be"),
        (lambda: temporal.stencil7_steps(u, u, *C7, good), "different array"),
        (lambda: temporal.stencil27_steps(u, out, (1, 2), good), "4 finite"),
        (lambda: temporal.stencil7_steps(u, out, *C7, [((2, 2), (1, 7), (1, 7)), ((2, 2), (2, 6), (2, 6))]),
         "empty"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call()
    temporal.stencil7_steps(u, out, *C7, [((1, 7),) * 3, ((3, 3), (2, 6), (2, 6))])   # empty last: no-op
    assert not out.any()


# ---------------------------------------------------------------------- CUDA (2.5-D blocking)
@pytest.fixture(scope="module")
def emulated_steps(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    src = temporal.CUDA_STEPS_SOURCE.replace("real_t", "double")
    return compile_for_cpu(src, tmp_path_factory.mktemp("cuda_steps"))


def test_cuda_steps_source_declares_both_kernels():
    ks = parse_kernels(temporal.CUDA_STEPS_SOURCE.replace("real_t", "double"))
    assert set(ks) == {"hpc_steps7", "hpc_steps27"} and all(len(p) == 10 for p in ks.values())


@pytest.mark.parametrize("kind", ["7", "27"])
def test_cuda_steps_emulated_on_the_cpu(emulated_steps, kind):
    """The CUDA source run through g++ (one thread runs each barrier phase for the whole block),
    with the launch geometry the GPU gets: bit for bit the single sweeps, for T = 1..4, several
    thread blocks per direction and fixed and shrinking sides."""
    rng = np.random.default_rng(8)
    for shape in [(9, 20, 40), (12, 37, 70)]:
        u = rng.standard_normal(shape)
        for T, fixed in itertools.product((1, 2, 4), FIXED[:3]):
            regs = step_regions(shape, T, fixed)
            out = np.full(shape, SENTINEL)
            grid, block, idx, reg = temporal.cuda_steps_launch(shape, regs)
            coeffs = C7 if kind == "7" else W27
            emulated_steps[f"hpc_steps{kind}"](grid, block, (u, out, *map(np.float64, coeffs), *idx, reg, np.int32(T)))
            ref = single_sweeps(u, kind, regs)
            last = tuple(slice(a, b) for a, b in regs[-1])
            assert np.array_equal(out[last], ref[last]), (shape, T, fixed)
            outside = np.ones(shape, bool)
            outside[last] = False
            assert np.all(out[outside] == SENTINEL)


def test_cuda_steps_launch_geometry():
    regs = step_regions((20, 300, 70), 3, FIXED[0])
    grid, block, args, reg = temporal.cuda_steps_launch((20, 300, 70), regs)
    (_, _), (j0, j1), (k0, k1) = regs[-1]
    tk, tj = temporal.CUDA_TILE[0] - 4, temporal.CUDA_TILE[1] - 4          # the last step's tile
    assert block == (*temporal.CUDA_TILE, 1)
    assert grid[0] * tk >= k1 - k0 > (grid[0] - 1) * tk and grid[1] * tj >= j1 - j0 > (grid[1] - 1) * tj
    assert reg.dtype == np.int32 and reg.tolist() == [x for r in regs for p in r for x in p]
    assert [type(a) for a in args] == [np.int64, np.int64]
    with pytest.raises(ValueError, match="1 to 4 steps"):
        temporal.cuda_steps_launch((20, 300, 70), step_regions((20, 300, 70), 5, FIXED[0]))


gpu_ok, gpu_why = gpu_status()


@pytest.mark.skipif(not gpu_ok, reason=f"no GPU (or CuPy stand-in): {gpu_why}")
@pytest.mark.parametrize("kind", ["7", "27"])
def test_cupy_steps_on_gpu_or_stand_in(kind):
    """CuPy arrays (a GPU, or tests/fakegpu: the CUDA source through g++): T = 3 and T = 6 (two
    launches) equal the single sweeps on the host, and nothing moves between host and device."""
    import cupy
    be = get_backend("gpu")
    u = np.random.default_rng(9).standard_normal((14, 21, 35))
    for T in (3, 6):
        regs = step_regions(u.shape, T, (1, 0, 0, 1, 0, 0))
        du = be.asarray(u)
        dout = cupy.full(u.shape, SENTINEL)
        with be.data_region() as moved:
            if kind == "7":
                temporal.stencil7_steps(du, dout, *C7, regs)
            else:
                temporal.stencil27_steps(du, dout, W27, regs)
            be.synchronize()
        assert moved.transfers == 0
        ref = single_sweeps(u, kind, regs)
        last = tuple(slice(a, b) for a, b in regs[-1])
        assert np.array_equal(cupy.asnumpy(dout)[last], ref[last]), T

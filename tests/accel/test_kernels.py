"""Fused stencil kernels against an independent np.roll reference, numba against the portable
array-API path (bit for bit: same operations, same order), the strict array-API backend, argument
checks, the numba disk cache, and the CUDA kernels: compiled with nvcc and run through an emulated
launch on the CPU (g++) when those tools exist, on a real GPU when one is usable."""
import itertools
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cuda_emulation import compile_for_cpu, parse_kernels
from hpcsuite.accel import get_backend, kernels
from hpcsuite.accel.kernels import stencil7, stencil27
from hpcsuite.runtime import gpu_status

C7 = (0.4, 0.1, 0.12, 0.08)
W27 = (0.3, 0.05, 0.025, 0.0125)
SHAPE = (9, 8, 7)
SENTINEL = -7.0
REGIONS = [
    None,                                  # the whole interior
    ((1, 8), (1, 7), (1, 6)),              # the same, spelled out
    ((2, 7), (3, 5), (1, 6)),              # shrunk unevenly
    ((4, 5), (4, 5), (3, 4)),              # one cell
    ((1, 2), (1, 7), (5, 6)),              # one plane and one line at the edges
]


def roll_reference(u, kind, c):
    """The stencil over the whole array with periodic wrap-around (np.roll): equal to the kernels
    wherever all neighbours are inside the array, i.e. on every allowed region."""
    sh = lambda o: np.roll(u, [-x for x in o], axis=(0, 1, 2))   # noqa: E731 - sh(o)[i] = u[i + o]
    if kind == "7":
        return c[0] * u + sum(c[d + 1] * (sh(e) + sh(tuple(-x for x in e)))
                              for d, e in enumerate(((1, 0, 0), (0, 1, 0), (0, 0, 1))))
    out = c[0] * u
    for o in itertools.product((-1, 0, 1), repeat=3):
        if any(o):
            out = out + c[sum(map(abs, o))] * sh(o)
    return out


def run_kernel(kind, u, out, region, **kw):
    if kind == "7":
        stencil7(u, out, *C7, region, **kw)
    else:
        stencil27(u, out, W27, region, **kw)


def region_slices(region, shape):
    region = region or tuple((1, n - 1) for n in shape)
    return tuple(slice(a, b) for a, b in region)


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(42).standard_normal(SHAPE)


@pytest.mark.parametrize("kind", ["7", "27"])
@pytest.mark.parametrize("region", REGIONS)
@pytest.mark.parametrize("impl", ["numba", "portable"])
def test_kernel_matches_roll_reference_inside_region_only(data, kind, region, impl):
    out = np.full(SHAPE, SENTINEL)
    run_kernel(kind, data, out, region, impl=impl)
    sl = region_slices(region, SHAPE)
    ref = roll_reference(data, kind, C7 if kind == "7" else W27)
    np.testing.assert_allclose(out[sl], ref[sl], rtol=0, atol=1e-14)
    outside = np.ones(SHAPE, bool)
    outside[sl] = False
    assert np.all(out[outside] == SENTINEL)                 # nothing written outside the region


@pytest.mark.parametrize("kind", ["7", "27"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numba_equals_portable_bit_for_bit(kind, dtype):
    # without fastmath numba performs the portable expression's operations in the same order
    rng = np.random.default_rng(7)
    for shape in [(5, 5, 5), (12, 9, 33), (3, 40, 4)]:
        u = rng.standard_normal(shape).astype(dtype)
        a, b = np.zeros_like(u), np.zeros_like(u)
        region = tuple((1 + d % 2, n - 1) for d, n in enumerate(shape))
        run_kernel(kind, u, a, region, impl="numba")
        run_kernel(kind, u, b, region, impl="portable")
        assert a.dtype == dtype
        assert np.array_equal(a, b), (shape, np.abs(a - b).max())
        ref = roll_reference(u.astype(np.float64), kind, C7 if kind == "7" else W27)
        sl = region_slices(region, shape)
        np.testing.assert_allclose(a[sl], ref[sl], rtol=0, atol=1e-5 if dtype == np.float32 else 1e-14)


def test_backend_selects_the_implementation(data):
    a, b, c = (np.zeros(SHAPE) for _ in range(3))
    stencil7(data, a, *C7, backend="cpu")                     # numba
    stencil7(data, b, *C7, backend=get_backend("cpu"))
    stencil7(data, c, *C7, impl="portable")
    assert np.array_equal(a, b) and np.array_equal(a, c)
    with pytest.raises(ValueError, match="impl 'numba' needs NumPy"):
        be = get_backend("strict")
        stencil7(be.asarray(data), be.zeros(SHAPE), *C7, impl="numba")


@pytest.mark.parametrize("kind", ["7", "27"])
def test_strict_array_api_backend(data, kind):
    be = get_backend("strict")
    u = be.asarray(data)
    out = be.full(SHAPE, SENTINEL)
    region = ((2, 7), (1, 7), (2, 5))
    with be.data_region() as moved:
        run_kernel(kind, u, out, region, backend=be)          # portable code on array_api_strict arrays
    assert moved.transfers == 0
    assert type(out).__module__.startswith("array_api_strict")
    host = np.full(SHAPE, SENTINEL)
    run_kernel(kind, data, host, region, impl="portable")
    assert np.array_equal(be.to_host(out), host)


def test_bad_arguments_raise_value_error(data):
    out = np.zeros(SHAPE)
    cases = [
        (lambda: stencil7(data, out, *C7, ((0, 5), (1, 7), (1, 6))), "reaches outside"),
        (lambda: stencil7(data, out, *C7, ((1, 9), (1, 7), (1, 6))), "reaches outside"),
        (lambda: stencil7(data, out, *C7, ((1, 5), (1, 7))), "three"),
        (lambda: stencil7(data, np.zeros((9, 8, 6)), *C7), "same shape"),
        (lambda: stencil7(data[0], out[0], *C7), "3-D"),
        (lambda: stencil7(data, data, *C7), "different array"),
        (lambda: stencil7(data[1:], data[:-1], *C7), "overlap"),
        (lambda: stencil7(data, out, *C7, impl="fortran"), "impl must be"),
        (lambda: stencil7(data, out, *C7, backend="tpu"), "backend must be"),
        (lambda: stencil7(data, out, 0.1, 0.2, float("nan"), 0.1), "finite"),
        (lambda: stencil27(data, out, (0.1, 0.2, 0.3)), "4 finite"),
        (lambda: stencil7(data.astype(int), out.astype(int), *C7), "float32 or float64"),
        (lambda: stencil7(data, out.astype(np.float32), *C7), "float32 or float64"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call()
    stencil7(data, out, *C7, ((3, 3), (1, 7), (1, 6)))          # an empty region is a no-op
    assert not out.any()


def test_cpu_threads_share_the_node(monkeypatch):
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    assert kernels.cpu_threads(10_000) == 1                      # many ranks on the node: one thread each
    assert 1 <= kernels.cpu_threads(1) <= kernels.numba.config.NUMBA_NUM_THREADS
    kernels.set_cpu_threads(1)
    assert kernels.numba.get_num_threads() == 1
    kernels.set_cpu_threads(kernels.cpu_threads(1))


def test_numba_kernels_are_cached_on_disk(tmp_path):
    # a second process loads the compiled kernels instead of compiling them again
    code = ("import json, numpy as np\nfrom hpcsuite.accel import kernels as k\nu = np.ones((4, 4, 4))\n"
            "k.stencil7(u, np.zeros_like(u), 1, 0, 0, 0)\nk.stencil27(u, np.zeros_like(u), (1, 0, 0, 0))\n"
            "print(json.dumps([sum(f.stats.cache_hits.values()) for f in (k._nb_stencil7, k._nb_stencil27)]))")
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [1, 1]


# ---------------------------------------------------------------------- CUDA kernels
def cuda_kernels(ctype="double"):
    """``{name: [(type, param), ...]}`` parsed from the CUDA source."""
    src = kernels.CUDA_SOURCE.replace("real_t", ctype)
    return src, parse_kernels(src)


def test_cuda_source_declares_both_kernels():
    _, ks = cuda_kernels()
    assert set(ks) == {"hpc_stencil7", "hpc_stencil27"}
    for params in ks.values():
        assert len(params) == 14


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    src, _ = cuda_kernels("double")
    return compile_for_cpu(src, tmp_path_factory.mktemp("cuda_emulation"))


@pytest.mark.parametrize("kind", ["7", "27"])
def test_cuda_kernels_emulated_on_the_cpu(emulated, kind):
    # the same launch code as on the GPU (grid, block, argument types), with the kernel run by g++
    rng = np.random.default_rng(5)
    for shape, region in [((9, 8, 7), None), ((6, 11, 37), ((2, 5), (1, 10), (3, 36))),
                          ((5, 20, 70), ((1, 4), (2, 18), (1, 69))), ((4, 4, 4), ((2, 3), (2, 3), (2, 3)))]:
        u = rng.standard_normal(shape)
        out, ref = np.full(shape, SENTINEL), np.full(shape, SENTINEL)
        coeffs = C7 if kind == "7" else W27
        reg = kernels.normalize_region(region, shape)
        kernels._launch_cuda(f"hpc_stencil{kind}", u, out, coeffs, reg, kernel=emulated[f"hpc_stencil{kind}"])
        run_kernel(kind, u, ref, region, impl="portable")
        assert np.array_equal(out, ref), (shape, region)     # same order of operations, no FMA


def test_cuda_launch_covers_region_exactly():
    grid, block, args = kernels.cuda_launch_config((10, 300, 70), ((1, 9), (3, 297), (1, 69)))
    assert block == kernels.CUDA_BLOCK
    assert grid[0] * block[0] >= 68 > (grid[0] - 1) * block[0]
    assert grid[1] * block[1] >= 294 > (grid[1] - 1) * block[1]
    assert grid[2] * block[2] >= 8 > (grid[2] - 1) * block[2]
    assert [type(a) for a in args] == [np.int64, np.int64] + [np.int32] * 6
    assert args[:2] == (300 * 70, 70)


gpu_ok, gpu_why = gpu_status()


@pytest.mark.skipif(not gpu_ok, reason=f"no GPU: {gpu_why}")
@pytest.mark.parametrize("kind", ["7", "27"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cupy_kernels_on_gpu(kind, dtype):
    import cupy
    be = get_backend("gpu")
    u = np.random.default_rng(3).standard_normal((20, 33, 65)).astype(dtype)
    region = ((2, 19), (1, 30), (3, 64))
    du = be.asarray(u)
    dout = cupy.full(u.shape, SENTINEL, dtype=dtype)
    with be.data_region() as moved:
        run_kernel(kind, du, dout, region, backend=be)
        be.synchronize()
    assert moved.transfers == 0
    ref = np.full(u.shape, SENTINEL, dtype=dtype)
    run_kernel(kind, u, ref, region, impl="portable")
    assert np.array_equal(cupy.asnumpy(dout), ref)

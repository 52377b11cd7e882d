"""runtime.cuda_modules: the one compiler of the package's CUDA sources (``real_t`` per dtype,
``--fmad=false``, compiled and looked up once). The compile-and-launch check runs on a GPU, or on
the CuPy stand-in (tests/fakegpu: the source compiled for the CPU with g++) in a subprocess; that
every package source compiles with NVRTC is tests/test_cuda_sources_nvrtc.py."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcsuite.runtime import gpu_status
from hpcsuite.runtime.cuda_modules import C_TYPES, OPTIONS, SOURCES, CudaSource

TESTS = Path(__file__).resolve().parents[1]

SCALE = r"""
extern "C" __global__ void scale(real_t* __restrict__ a, const real_t c, const long long n)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * c + (real_t)1;
}
"""


def test_real_t_becomes_the_c_type_of_the_arrays_dtype():
    src = CudaSource("test.scale", SCALE, real_types=("double", "float"), register=False)
    assert "float* __restrict__ a, const float c" in src.text(np.float32)
    assert "double* __restrict__ a, const double c" in src.text("float64")
    assert set(src.texts()) == {"double", "float"} and "real_t" not in "".join(src.texts().values())
    plain = CudaSource("test.plain", 'extern "C" __global__ void k(double* a) { a[0] = 1.0; }', register=False)
    assert plain.texts() == {None: plain.source} and plain.text() == plain.source
    assert OPTIONS == ("--fmad=false",) and C_TYPES == {"float64": "double", "float32": "float"}


def test_a_dtype_the_source_is_not_written_for_is_refused_by_name():
    src = CudaSource("test.scale", SCALE, real_types=("double",), register=False)
    with pytest.raises(ValueError, match=r"test\.scale: its CUDA kernels take double arrays, got dtype float32"):
        src.text(np.float32)
    with pytest.raises(ValueError, match="test.plain: its CUDA source has no real_t"):
        CudaSource("test.plain", SCALE, register=False).function("scale", np.float64)
    with pytest.raises(ValueError, match="real_types must be among"):
        CudaSource("test.bad", SCALE, real_types=("half",), register=False)


def test_sources_are_registered_by_module_name_unless_asked_not_to():
    from hpcsuite.solvers import thomas
    assert SOURCES["hpcsuite.solvers.thomas"].source is thomas.CUDA_SOURCE
    CudaSource("test.unregistered", SCALE, register=False)
    assert "test.unregistered" not in SOURCES


def _compile_and_launch() -> None:
    """Compile ``SCALE`` for float64 and float32, launch it and compare with NumPy; the module and
    the kernel come from the cache the second time."""
    import cupy
    src = CudaSource("test.scale", SCALE, real_types=("double", "float"), register=False)
    for dtype in (np.float64, np.float32):
        assert src.module(dtype) is src.module(dtype)
        k = src.function("scale", dtype)
        assert k is src.function("scale", np.dtype(dtype).name)
        host = np.arange(300, dtype=dtype) / 7
        a = cupy.asarray(host)
        k(((300 + 127) // 128,), (128,), (a, dtype(1.5), np.int64(300)))
        assert np.array_equal(cupy.asnumpy(a), host * dtype(1.5) + dtype(1)), dtype
    assert src.module(np.float64) is not src.module(np.float32)


def test_cuda_source_compiles_and_launches_once_per_dtype():
    """On a GPU in this process, else on the CuPy stand-in in a subprocess (the stand-in's
    ``RawModule`` refuses options without ``--fmad=false``)."""
    if gpu_status()[0]:
        _compile_and_launch()
        return
    code = "import test_cuda_modules as t; t._compile_and_launch(); print('ok')"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS / "fakegpu"), str(TESTS / "runtime")]))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr

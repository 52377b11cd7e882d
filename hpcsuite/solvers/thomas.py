"""The tridiagonal (Thomas) solve of the FFT Poisson solver as one CUDA kernel.

``PoissonSolver._tridiag`` runs the Thomas recurrences as a Python loop over the levels, up and
down, with a few array operations per level: every one a kernel launch on a GPU, for nz levels
twice (about a millisecond per level pair at 512 x 512 x 128 on an H200, launch-bound on small
grids). Here one thread per (kx, ky) column runs both recurrences over the complex values.

The operations are the loop's in the same order (compiled without FMA contraction), so the result
equals it to the last bit. ``USE_CUDA = False`` runs the loop instead (tests compare the two; the
CuPy stand-in of ``tests/fakegpu`` runs the kernel compiled for the CPU). Local.
"""
from __future__ import annotations

import numpy as np

from ..runtime import optional
from ..runtime.cuda_modules import CudaSource

__all__ = ["USE_CUDA", "usable", "thomas_columns"]

#: use the kernel for C-contiguous complex128 CuPy blocks
USE_CUDA = True
CUDA_BLOCK = 128

CUDA_SOURCE = r"""
// Thomas algorithm on each z-column of f (ncol = nkx * nky columns of nz complex values, re/im
// interleaved; strides s0, s1, s2 in doubles along kx, ky, z: cuFFT along a middle axis hands back
// a strided block, read as it is); m and cp are (nz, ncol) real factors, a the (nz) lower diagonal:
// as poisson.PoissonSolver._tridiag
extern "C" __global__ void thomas_columns(double* __restrict__ f, const double* __restrict__ m,
        const double* __restrict__ cp, const double* __restrict__ a, const long long ncol, const int nz,
        const long long nky, const long long s0, const long long s1, const long long s2)
{
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= ncol) return;
    double* d = f + (col / nky) * s0 + (col % nky) * s1;
    double re = d[0] * m[col], im = d[1] * m[col];
    d[0] = re; d[1] = im;
    for (int k = 1; k < nz; ++k) {
        const double mk = m[k * ncol + col], ak = a[k];
        re = (d[k * s2] - ak * re) * mk;
        im = (d[k * s2 + 1] - ak * im) * mk;
        d[k * s2] = re; d[k * s2 + 1] = im;
    }
    for (int k = nz - 2; k >= 0; --k) {
        const double ck = cp[k * ncol + col];
        re = d[k * s2] - ck * re;
        im = d[k * s2 + 1] - ck * im;
        d[k * s2] = re; d[k * s2 + 1] = im;
    }
}
"""


_CUDA = CudaSource(__name__, CUDA_SOURCE)


def _kernel():
    return _CUDA.function("thomas_columns")


def usable(f, *factors) -> bool:
    """Whether :func:`thomas_columns` applies: ``USE_CUDA``, ``f`` a 3-D complex128 CuPy array
    (any non-negative strides: it is read in place) and the factors C-contiguous float64 CuPy
    arrays."""
    if not USE_CUDA:
        return False
    cupy_array = lambda a: type(a).__module__.split(".")[0] == "cupy"          # noqa: E731
    return (cupy_array(f) and f.dtype == np.complex128 and f.ndim == 3 and all(st >= 0 for st in f.strides)
            and all(cupy_array(a) and a.flags.c_contiguous and a.dtype == np.float64 for a in factors)
            and _compiles())


def _compiles() -> bool:
    return optional.compiles("hpcsuite.solvers.thomas", _kernel, "the tridiagonal solve runs level by level")


def thomas_columns(f, m, cp, a) -> None:
    """Solve every z-column of the complex ``(kx, ky, nz)`` block ``f`` in place, with the Thomas
    factors ``m``, ``cp`` (shape ``(nz, kx, ky)``) and the lower diagonal ``a`` (length ``nz``).

    Column ``c``: ``d[0] *= m[0]``; ``d[k] = (d[k] - a[k] d[k-1]) m[k]`` upwards; then
    ``d[k] -= cp[k] d[k+1]`` downwards.
    """
    import cupy
    nkx, nky, nz = (int(n) for n in f.shape)
    ncol = nkx * nky
    if ncol == 0 or nz == 0:
        return
    # any strides (cuFFT along a middle axis hands back a strided block: read in place, no copies);
    # the kernel gets the block as doubles, each complex value a contiguous (re, im) pair
    pairs = cupy.lib.stride_tricks.as_strided(f.real, shape=f.shape + (2,), strides=f.strides + (8,))
    s0, s1, s2 = (np.int64(st // 8) for st in f.strides)
    grid = (-(-ncol // CUDA_BLOCK),)
    _kernel()(grid, (CUDA_BLOCK,), (pairs, m, cp, a, np.int64(ncol), np.int32(nz), np.int64(nky), s0, s1, s2))

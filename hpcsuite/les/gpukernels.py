"""CUDA kernels for the LES operators that the array-API source runs worst on a GPU.

The GPU runs the array-API source of the term modules through CuPy: one kernel per array operation.
That is fine for stencils of a few operations, but the saturation adjustment (``thermo``) is eight
Newton steps of about fifteen elementwise operations each, every one a pass over the whole field
(a fifth of a BOMEX-like step at 512 x 512 x 128 on an H200). Here one thread per cell does them
all in registers: one pass, reading ``thl`` and ``qt`` and writing ``ql``, ``T`` and ``thv``.
(The pressure solve's tridiagonal kernel is in ``solvers.thomas``.)

The kernel does the operations of the array-API source in the same order (compiled without FMA
contraction, ``--fmad=false``); it differs from it only where the GPU's ``exp`` differs from
NumPy's in the last bits. ``tests/les/test_gpukernels.py`` compares them with the source on the
CuPy stand-in (the kernel compiled for the CPU) and, where a GPU is present, on the GPU.

``fused.ENABLED = False`` (or ``HPCSUITE_LES_FUSED=0``) turns it off with the CPU kernels, so a
run can use the array-API source everywhere. All functions here are local.
"""
from __future__ import annotations

import functools

import numpy as np

from . import fused

__all__ = ["usable", "thermo"]

CUDA_BLOCK = 256

CUDA_SOURCE = r"""
// Bolton (1980) saturation vapour pressure and its temperature derivative, as thermo.py
extern "C" __global__ void les_thermo(const double* __restrict__ thl, const double* __restrict__ qt,
        const double* __restrict__ presf, const double* __restrict__ exnf,
        double* __restrict__ ql_out, double* __restrict__ T_out, double* __restrict__ thv_out,
        const long long n, const int nz, const int niter,
        const double c, const double ep, const double ep2, const double rvrd)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const int k = (int)(p % nz);
    const double pr = presf[k], exn = exnf[k], th_l = thl[p], q = qt[p];
    const double tl = exn * th_l;
    double es = 611.2 * exp(17.67 * (tl - 273.15) / (tl - 29.65));
    const double qs_l = ep * es / (pr - (1.0 - ep) * es);
    double ql = 0.0;
    if (q > qs_l) {
        double T = tl;
        for (int it = 0; it < niter; ++it) {
            es = 611.2 * exp(17.67 * (T - 273.15) / (T - 29.65));
            const double t29 = T - 29.65;
            const double des = es * (17.67 * (273.15 - 29.65)) / (t29 * t29);
            const double den = pr - (1.0 - ep) * es;
            const double qs = ep * es / den;
            const double dqs = ep * pr * des / (den * den);
            T = T - (T - tl - c * (q - qs)) / (1.0 + c * dqs);
        }
        es = 611.2 * exp(17.67 * (T - 273.15) / (T - 29.65));
        const double qs = ep * es / (pr - (1.0 - ep) * es);
        ql = fmax(q - qs, 0.0);
    }
    const double T_new = tl + c * ql;
    const double th = th_l + c * ql / exn;
    ql_out[p] = ql;
    T_out[p] = T_new;
    thv_out[p] = th * (1.0 + ep2 * q - rvrd * ql);
}

"""


@functools.lru_cache(maxsize=None)
def _module():
    import cupy
    return cupy.RawModule(code=CUDA_SOURCE, options=("--fmad=false",))


def _kernel(name: str):
    return _module().get_function(name)


def usable(*arrays) -> bool:
    """Whether these kernels apply: enabled, every array a C-contiguous float64 or complex128 CuPy
    array (the CuPy stand-in's arrays count: tests)."""
    if not fused.ENABLED:
        return False
    for a in arrays:
        if type(a).__module__.split(".")[0] != "cupy" or not a.flags.c_contiguous \
                or a.dtype not in (np.float64, np.complex128):
            return False
    return True


def _grid(n: int) -> tuple[tuple[int], tuple[int]]:
    return (max(1, -(-int(n) // CUDA_BLOCK)),), (CUDA_BLOCK,)


def thermo(xp, thl, qt, presf, exnf, niter: int):
    """``(ql, T, thv)`` of :func:`thermo.saturation_adjust` and :func:`thermo.virtual_theta` in one
    pass. ``thl``, ``qt``: blocks whose last axis is the vertical; ``presf``, ``exnf``: profiles."""
    from .thermo import CP, EP, LV, RD, RV, _EP2
    ql, T, thv = xp.empty_like(thl), xp.empty_like(thl), xp.empty_like(thl)
    grid, block = _grid(thl.size)
    _kernel("les_thermo")(grid, block, (thl, qt, presf, exnf, ql, T, thv, np.int64(thl.size),
                                        np.int32(thl.shape[-1]), np.int32(niter), np.float64(LV / CP),
                                        np.float64(EP), np.float64(_EP2), np.float64(RV / RD)))
    return ql, T, thv


"""``a[dst] = a[src]`` within one device array in a single kernel launch.

A halo update of a block that wraps around onto itself (one rank along a periodic dimension) copies
up to eight border regions in 2-D, 26 in 3-D. On a GPU each copy is a kernel launch, and on small
grids launches are what a step costs; with flat indices precomputed once, CuPy's ``a[dst] = a[src]``
makes two launches (a gather into a temporary, then a scatter), the kernel here one. CuPy has no
one-launch form (``cupyx`` scatter functions add or take a separate source), hence the kernel.
"""
from __future__ import annotations

import functools

from . import optional

__all__ = ["copy_within"]

CUDA_SOURCE = r"""
extern "C" __global__ void hpc_copy_within64(long long* __restrict__ a, const long long* __restrict__ src,
        const long long* __restrict__ dst, const long long n, const int words)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= n * words) return;
    const long long e = p / words, w = p % words;
    a[dst[e] * words + w] = a[src[e] * words + w];
}

extern "C" __global__ void hpc_copy_within32(int* __restrict__ a, const long long* __restrict__ src,
        const long long* __restrict__ dst, const long long n, const int words)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= n * words) return;
    const long long e = p / words, w = p % words;
    a[dst[e] * words + w] = a[src[e] * words + w];
}
"""

BLOCK = 256


@functools.lru_cache(maxsize=None)
def _function(name: str):
    import cupy
    return cupy.RawModule(code=CUDA_SOURCE, options=("--fmad=false",)).get_function(name)


def _compiled() -> bool:
    return optional.compiles("hpcsuite.runtime.index_copy", lambda: _function("hpc_copy_within64"),
                             "halo wrap-around copies use a gather and a scatter")


def copy_within(flat, src, dst) -> None:
    """``flat[dst] = flat[src]``. Local.

    ``flat`` is a 1-D C-contiguous array, ``src`` and ``dst`` int64 index arrays of one length on
    its device; no element may be both read and written (a halo's ghost cells are never its border
    cells). On CuPy arrays whose items are a multiple of 4 bytes this is one kernel launch; anywhere
    else, or if the kernel does not compile, it is plain indexing.
    """
    isz = flat.dtype.itemsize
    if type(flat).__module__.split(".")[0] == "cupy" and isz % 4 == 0 and _compiled():
        import cupy
        n = int(src.shape[0])
        if n == 0:
            return
        wide = isz % 8 == 0
        words = isz // (8 if wide else 4)
        a = flat.view(cupy.int64 if wide else cupy.int32)
        total = n * words
        _function("hpc_copy_within64" if wide else "hpc_copy_within32")(
            (-(-total // BLOCK),), (BLOCK,), (a, src, dst, cupy.int64(n), cupy.int32(words)))
        return
    flat[dst] = flat[src]

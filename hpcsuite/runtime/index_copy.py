"""``a[dst] = a[src]`` within one device array in a single kernel launch.

A halo update of a block that wraps around onto itself (one rank along a periodic dimension) copies
up to eight border regions in 2-D, 26 in 3-D. On a GPU each copy is a kernel launch, and on small
grids launches are what a step costs; with flat indices precomputed once, CuPy's ``a[dst] = a[src]``
makes two launches (a gather into a temporary, then a scatter), the kernel here one. CuPy has no
one-launch form (``cupyx`` scatter functions add or take a separate source), hence the kernel.

:func:`copy_within_many` does the same for several arrays in one launch (the halos of all prognostic
fields of a model): the kernel reads the arrays' device addresses from a table.
"""
from __future__ import annotations

from . import optional
from .cuda_modules import CudaSource

__all__ = ["ManyCopy", "copy_within", "copy_within_many"]

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

extern "C" __global__ void hpc_copy_within_many64(const long long* __restrict__ arrays,
        const int* __restrict__ which, const long long* __restrict__ src, const long long* __restrict__ dst,
        const long long n)
{
    const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= n) return;
    long long* a = (long long*)arrays[which[e]];      // the device address of element e's array
    a[dst[e]] = a[src[e]];
}
"""

BLOCK = 256


_function = CudaSource(__name__, CUDA_SOURCE).function


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


class ManyCopy:
    """``flats[i][dst] = flats[i][src]`` for several arrays at once; see :func:`copy_within_many`.

    Parameters
    ----------
    flats : sequence of arrays
        1-D C-contiguous views of the arrays, all on one device and of one dtype.
    index : sequence of (src, dst)
        Per array, the int64 flat index arrays (as :func:`copy_within` takes them).

    On CuPy arrays of 8-byte items the copies are one kernel launch, over a table of the arrays'
    device addresses made here: the arrays must stay where they are (``flats`` keeps them alive).
    Anywhere else it is one :func:`copy_within` per array.
    """

    def __init__(self, flats, index):
        self.flats, self.index = list(flats), [tuple(ix) for ix in index]
        self._table = None
        if not self.flats or type(self.flats[0]).__module__.split(".")[0] != "cupy":
            return
        if any(f.dtype.itemsize != 8 or f.dtype != self.flats[0].dtype for f in self.flats) or not _compiled():
            return
        import cupy
        sizes = [int(s.shape[0]) for s, _ in self.index]
        self._n = sum(sizes)
        self._table = (cupy.asarray([f.data.ptr for f in self.flats], dtype=cupy.int64),
                       cupy.concatenate([cupy.full(k, i, dtype=cupy.int32) for i, k in enumerate(sizes)]),
                       cupy.concatenate([s for s, _ in self.index]),
                       cupy.concatenate([d for _, d in self.index]))

    @property
    def launches(self) -> int:
        """Kernel launches per :meth:`run` on a GPU (1 with the table; for tests and benchmarks)."""
        return 1 if self._table is not None else len(self.flats)

    def run(self) -> None:
        """Do the copies. Local."""
        if self._table is None:
            for f, (s, d) in zip(self.flats, self.index):
                copy_within(f, s, d)
            return
        if self._n == 0:
            return
        import cupy
        _function("hpc_copy_within_many64")((-(-self._n // BLOCK),), (BLOCK,), (*self._table, cupy.int64(self._n)))


def copy_within_many(flats, index) -> None:
    """``flats[i][dst_i] = flats[i][src_i]`` for every array ``i``. Local.

    One kernel launch on CuPy arrays of 8-byte items (one :func:`copy_within` per array elsewhere).
    Builds its address table each call; keep a :class:`ManyCopy` to reuse it.
    """
    ManyCopy(flats, index).run()

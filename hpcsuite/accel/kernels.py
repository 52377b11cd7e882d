"""Fused stencil kernels: one pass over memory per step, on NumPy (numba), CuPy and any array API.

The hot loop of an explicit stencil solver written as array expressions (``c0*u + cx*(u[2:] +
u[:-2]) + ...``) makes a temporary per term, so every step streams the field through memory many
times. These kernels read each input element once and write each output element once:

* :func:`stencil7`: ``out = c0*u + cx*(u[i+1] + u[i-1]) + cy*(u[j+1] + u[j-1]) + cz*(u[k+1] + u[k-1])``
* :func:`stencil27`: ``out = w0*u + wf*(6 faces) + we*(12 edges) + wc*(8 corners)``

over an index ``region`` of a padded 3-D array (start/stop per dimension, inside the array by at
least one cell on every side), so a deep-halo solver can update a region that shrinks step by step.

Implementations (``impl``), chosen from the backend (:class:`~hpcsuite.accel.Backend` or
:class:`~hpcsuite.runtime.Device`, or its name) or from the array type when ``impl`` is not given:

``"numba"`` (backend ``"cpu"``, NumPy arrays)
    ``@njit(parallel=True, fastmath=False, cache=True)`` loops. Without fastmath the operations
    are the portable expression's, in the same order, so results equal it to the last bit. The
    compiled code is cached on disk (next to this file, or numba's user cache directory, or
    ``$NUMBA_CACHE_DIR``), so only the very first call on a machine pays the compile time (seconds).
    numba comes with the ``fast`` extra; without it (:data:`HAVE_NUMBA` false) backend ``"cpu"``
    and NumPy arrays run ``"portable"`` (the same results, slower), and ``impl="numba"`` raises
    ``InputError`` naming the extra.
``"cupy"`` (backend ``"gpu"``, CuPy arrays)
    A CUDA kernel (:data:`CUDA_SOURCE`, compiled by NVRTC through ``cupy.RawModule`` with
    ``--fmad=false`` so that it rounds like the CPU: ``runtime.cuda_modules``). CuPy is imported
    only on this path.
``"portable"`` (backend ``"strict"``, any array API namespace, also NumPy on request)
    Slicing expressions; the reference for the other two.

All functions here are local (no communication).

Examples
--------
>>> import numpy as np
>>> u = np.random.default_rng(0).random((6, 6, 6))
>>> a, b = np.zeros_like(u), np.zeros_like(u)
>>> stencil7(u, a, 0.4, 0.1, 0.1, 0.1, ((1, 5), (2, 4), (1, 5)))            # numba
>>> stencil7(u, b, 0.4, 0.1, 0.1, 0.1, ((1, 5), (2, 4), (1, 5)), impl="portable")
>>> bool(np.array_equal(a, b))
True
"""
from __future__ import annotations

import functools
import itertools
import os
from typing import Sequence

import numpy as np

from ..runtime import optional
from ..runtime.cuda_modules import CudaSource
from .backend import Backend

__all__ = ["stencil7", "stencil27", "IMPLS", "STENCIL27_OFFSETS", "normalize_region", "resolve_impl",
           "check_arrays", "check_coeffs", "cpu_threads",
           "set_cpu_threads", "CUDA_SOURCE", "CUDA_BLOCK", "cuda_launch_config", "HAVE_NUMBA"]

#: whether numba is installed (the ``fast`` extra); without it the CPU runs the portable kernels
numba, HAVE_NUMBA = optional.numba_module()

IMPLS = ("numba", "portable", "cupy")
_IMPL_OF_BACKEND = {"cpu": "numba", "gpu": "cupy", "strict": "portable"}

#: The 26 neighbour offsets of the 27-point stencil grouped by kind (faces, edges, corners), each in
#: lexicographic order: the order in which every implementation adds them up.
STENCIL27_OFFSETS = tuple(
    tuple(o for o in itertools.product((-1, 0, 1), repeat=3) if sum(map(abs, o)) == n) for n in (1, 2, 3))


# ---------------------------------------------------------------------- public kernels
def stencil7(u, out, c0: float, cx: float, cy: float, cz: float, region=None, *,
             backend: Backend | str | None = None, impl: str | None = None) -> None:
    """``out[region] = c0*u + cx*(u[i+1]+u[i-1]) + cy*(u[j+1]+u[j-1]) + cz*(u[k+1]+u[k-1])``.

    Local. Cells of ``out`` outside ``region`` are left as they are.

    Parameters
    ----------
    u, out : 3-D arrays of the same shape and floating dtype (float32 or float64)
        Input and output; they must not overlap. NumPy for ``"numba"``, C-contiguous CuPy for
        ``"cupy"``, any array-API array for ``"portable"``.
    c0, cx, cy, cz : float
        Centre weight and the weights of the neighbour pairs along each dimension.
    region : ((i0, i1), (j0, j1), (k0, k1)), optional
        Half-open index ranges in ``u``; default: everything but the outermost layer. Every range
        must satisfy ``1 <= start`` and ``stop <= extent - 1`` (the neighbours are read); an empty
        range (``start >= stop``) makes the call a no-op.
    backend : Backend, runtime.Device or {"cpu", "gpu", "strict"}, optional
        Picks the implementation: numba, cupy, portable. Default: from the array type.
    impl : {"numba", "portable", "cupy"}, optional
        Overrides ``backend`` (e.g. ``impl="portable"`` runs the reference on NumPy arrays).

    Raises
    ------
    ValueError
        Bad shapes, dtypes, overlapping arrays, a region outside the array, an unknown ``impl``.
    """
    how = resolve_impl(u, backend, impl)
    reg = check_arrays(u, out, region, how)
    coeffs = check_coeffs((c0, cx, cy, cz), 4, "stencil7 coefficients (c0, cx, cy, cz)")
    if reg is None:
        return
    if how == "numba":
        t = u.dtype.type           # float32 arrays: compute in float32, as NumPy does
        _nb_stencil7(u, out, *(t(c) for c in coeffs), *_flat(reg))
    elif how == "cupy":
        _launch_cuda("hpc_stencil7", u, out, coeffs, reg)
    else:
        _portable7(u, out, coeffs, reg)


def stencil27(u, out, weights: Sequence[float], region=None, *,
              backend: Backend | str | None = None, impl: str | None = None) -> None:
    """``out[region] = w0*u + wf*(sum of 6 faces) + we*(sum of 12 edges) + wc*(sum of 8 corners)``.

    Local. ``weights = (w0, wf, we, wc)``: centre, face, edge and corner neighbours (isotropic
    27-point stencils, e.g. a compact Laplacian on a uniform grid). Everything else as
    :func:`stencil7`; the neighbours are added in the order of :data:`STENCIL27_OFFSETS`.
    """
    how = resolve_impl(u, backend, impl)
    reg = check_arrays(u, out, region, how)
    w = check_coeffs(weights, 4, "stencil27 weights (centre, face, edge, corner)")
    if reg is None:
        return
    if how == "numba":
        t = u.dtype.type
        _nb_stencil27(u, out, *(t(c) for c in w), *_flat(reg))
    elif how == "cupy":
        _launch_cuda("hpc_stencil27", u, out, w, reg)
    else:
        _portable27(u, out, w, reg)


# ---------------------------------------------------------------------- validation
def resolve_impl(u, backend, impl) -> str:
    """The implementation (``"numba"``, ``"portable"``, ``"cupy"``) for array ``u`` given the
    ``backend`` and ``impl`` arguments of the kernels. Local; raises ``ValueError`` on unknown names."""
    if impl is not None:
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {', '.join(map(repr, IMPLS))}, got {impl!r}")
        if impl == "numba" and not HAVE_NUMBA:
            optional.require("numba", "impl 'numba' (the CPU stencil kernels)")
        return impl
    if backend is not None:
        name = backend if isinstance(backend, str) else getattr(backend, "name", backend)   # Backend, Device
        if name not in _IMPL_OF_BACKEND:
            raise ValueError(f"backend must be one of {', '.join(map(repr, _IMPL_OF_BACKEND))}, got {name!r}")
        how = _IMPL_OF_BACKEND[name]
        return "portable" if how == "numba" and not HAVE_NUMBA else how
    if isinstance(u, np.ndarray):
        return "numba" if HAVE_NUMBA else "portable"
    if type(u).__module__.startswith("cupy"):
        return "cupy"
    return "portable"


def normalize_region(region, shape) -> tuple[tuple[int, int], ...] | None:
    """``region`` as three ``(start, stop)`` int pairs, checked against ``shape`` (a padded 3-D
    array); ``None`` when it is empty. Local.

    Raises ``ValueError`` when a range reaches the outermost layer (whose neighbours do not exist).
    """
    if region is None:
        region = tuple((1, n - 1) for n in shape)
    try:
        reg = tuple((int(a), int(b)) for a, b in region)
    except (TypeError, ValueError):
        raise ValueError(f"region must be three (start, stop) pairs, got {region!r}") from None
    if len(reg) != 3:
        raise ValueError(f"region must be three (start, stop) pairs, got {region!r}")
    if any(b <= a for a, b in reg):
        return None
    for d, ((a, b), n) in enumerate(zip(reg, shape)):
        if a < 1 or b > n - 1:
            raise ValueError(f"region {reg} reaches outside the array of shape {tuple(shape)} along "
                             f"dimension {d}: need 1 <= start and stop <= {n - 1} (the neighbours are read)")
    return reg


def check_arrays(u, out, region, how):
    """Check ``u`` and ``out`` for implementation ``how`` (shapes, dtypes, no overlap) and return
    :func:`normalize_region` of ``region``. Local; raises ``ValueError``."""
    shape = tuple(u.shape)
    if len(shape) != 3 or tuple(out.shape) != shape:
        raise ValueError(f"u and out must be 3-D arrays of the same shape, got {shape} and {tuple(out.shape)}")
    if str(u.dtype).rsplit(".", 1)[-1] not in ("float32", "float64") or u.dtype != out.dtype:
        raise ValueError(f"u and out must both be float32 or float64, got {u.dtype} and {out.dtype}")
    if u is out:
        raise ValueError("out must be a different array from u (a stencil cannot update in place)")
    if how == "numba":
        if not (isinstance(u, np.ndarray) and isinstance(out, np.ndarray)):
            raise ValueError(f"impl 'numba' needs NumPy arrays, got {type(u).__name__} and {type(out).__name__}")
        if np.may_share_memory(u, out):
            raise ValueError("u and out overlap in memory (a stencil cannot update in place)")
    if how == "cupy":
        if not (u.flags.c_contiguous and out.flags.c_contiguous):
            raise ValueError("impl 'cupy' needs C-contiguous CuPy arrays")
        a, b = u.data.ptr, out.data.ptr
        if a < b + out.nbytes and b < a + u.nbytes:
            raise ValueError("u and out overlap in memory (a stencil cannot update in place)")
    return normalize_region(region, shape)


def check_coeffs(values, n: int, what: str) -> tuple[float, ...]:
    """``values`` as ``n`` finite floats, or ``ValueError`` naming ``what``. Local."""
    try:
        vals = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be {n} real numbers, got {values!r}") from None
    if len(vals) != n or not all(np.isfinite(vals)):
        raise ValueError(f"{what} must be {n} finite real numbers, got {values!r}")
    return vals


def _flat(reg) -> tuple[int, ...]:
    return tuple(x for pair in reg for x in pair)


# ---------------------------------------------------------------------- portable (array API)
def _shifted(u, reg, off):
    return u[tuple(slice(a + o, b + o) for (a, b), o in zip(reg, off))]


def _portable7(u, out, c, reg) -> None:
    c0, cx, cy, cz = c
    s = functools.partial(_shifted, u, reg)
    out[tuple(slice(a, b) for a, b in reg)] = (
        c0 * s((0, 0, 0)) + cx * (s((1, 0, 0)) + s((-1, 0, 0))) + cy * (s((0, 1, 0)) + s((0, -1, 0)))
        + cz * (s((0, 0, 1)) + s((0, 0, -1))))


def _portable27(u, out, w, reg) -> None:
    s = functools.partial(_shifted, u, reg)
    sums = []
    for group in STENCIL27_OFFSETS:
        acc = s(group[0])
        for off in group[1:]:          # left to right, like the loops below
            acc = acc + s(off)
        sums.append(acc)
    out[tuple(slice(a, b) for a, b in reg)] = w[0] * s((0, 0, 0)) + w[1] * sums[0] + w[2] * sums[1] + w[3] * sums[2]


# ---------------------------------------------------------------------- numba (CPU)
# Each (i, j) row is taken as a 1-D view starting at k0 - 1 and indexed with k = 0, 1, ...: numba
# then knows no index is negative, drops its wrap-around checks, and LLVM vectorises the k loop
# (3-4x faster than u[i, j, k - 1] indexing). Without fastmath there is no reassociation and no FMA.
@numba.njit(parallel=True, fastmath=False, cache=True)
def _nb_stencil7(u, out, c0, cx, cy, cz, i0, i1, j0, j1, k0, k1):  # pragma: no cover - compiled
    n = k1 - k0
    for i in numba.prange(i0, i1):
        for j in range(j0, j1):
            zz = u[i, j, k0 - 1:k1 + 1]                  # zz[k + 1] is u[i, j, k0 + k]
            m0, p0 = u[i - 1, j, k0:k1], u[i + 1, j, k0:k1]
            zm, zp = u[i, j - 1, k0:k1], u[i, j + 1, k0:k1]
            o = out[i, j, k0:k1]
            for k in range(n):
                o[k] = (c0 * zz[k + 1] + cx * (p0[k] + m0[k]) + cy * (zp[k] + zm[k])
                        + cz * (zz[k + 2] + zz[k]))


@numba.njit(fastmath=False, cache=True, inline="always")
def stencil27_row(o, mm, m0, mp, zm, zz, zp, pm, p0, pp, n, w0, wf, we, wc):  # pragma: no cover - compiled
    """One row of the 27-point update (numba; :mod:`.temporal`'s blocked plane indexes its buffers
    directly but sums in this order, so the single sweep and the blocked kernel round alike). The nine rows ``ab = u[i + a, j + b, k0 - 1:k1 + 1]``
    (m = -1, z = 0, p = +1) start one cell early: offset c along k is index k + 1 + c; the sums
    follow STENCIL27_OFFSETS (same rounding as the portable path). Local."""
    for k in range(n):
        f = m0[k + 1] + zm[k + 1] + zz[k] + zz[k + 2] + zp[k + 1] + p0[k + 1]
        e = (mm[k + 1] + m0[k] + m0[k + 2] + mp[k + 1] + zm[k] + zm[k + 2] + zp[k] + zp[k + 2]
             + pm[k + 1] + p0[k] + p0[k + 2] + pp[k + 1])
        c = mm[k] + mm[k + 2] + mp[k] + mp[k + 2] + pm[k] + pm[k + 2] + pp[k] + pp[k + 2]
        o[k] = w0 * zz[k + 1] + wf * f + we * e + wc * c


@numba.njit(parallel=True, fastmath=False, cache=True)
def _nb_stencil27(u, out, w0, wf, we, wc, i0, i1, j0, j1, k0, k1):  # pragma: no cover - compiled
    # rows ab = u[i + a, j + b, k0 - 1:k1 + 1] (m = -1, z = 0, p = +1); offset c along k is index
    # k + 1 + c; the sums follow STENCIL27_OFFSETS (same rounding as the portable path)
    n = k1 - k0
    for i in numba.prange(i0, i1):
        for j in range(j0, j1):
            mm, m0, mp = u[i - 1, j - 1, k0 - 1:k1 + 1], u[i - 1, j, k0 - 1:k1 + 1], u[i - 1, j + 1, k0 - 1:k1 + 1]
            zm, zz, zp = u[i, j - 1, k0 - 1:k1 + 1], u[i, j, k0 - 1:k1 + 1], u[i, j + 1, k0 - 1:k1 + 1]
            pm, p0, pp = u[i + 1, j - 1, k0 - 1:k1 + 1], u[i + 1, j, k0 - 1:k1 + 1], u[i + 1, j + 1, k0 - 1:k1 + 1]
            stencil27_row(out[i, j, k0:k1], mm, m0, mp, zm, zz, zp, pm, p0, pp, n, w0, wf, we, wc)


def cpu_threads(ranks_on_node: int = 1) -> int:
    """Threads per rank for the numba kernels: ``$NUMBA_NUM_THREADS`` if set, else this process's
    CPU share: its affinity mask when a launcher bound it to fewer cores than the node has, else
    the node's cores divided by ``ranks_on_node`` (at least 1). Local.

    Oversubscribing (4 ranks x 2 threads on 2 cores) makes OpenMP threads spin against each other.
    """
    if not HAVE_NUMBA:
        return 1                      # the portable kernels are NumPy expressions: one thread
    if os.environ.get("NUMBA_NUM_THREADS"):
        return numba.config.NUMBA_NUM_THREADS
    total = os.cpu_count() or 1
    try:
        mine = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        mine = total
    n = mine if mine < total else total // max(1, int(ranks_on_node))
    return max(1, min(n, numba.config.NUMBA_NUM_THREADS))


def set_cpu_threads(n: int) -> None:
    """Use ``n`` threads (clipped to numba's pool) in the numba kernels called from this thread
    (nothing without numba). Local."""
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))


# ---------------------------------------------------------------------- CUDA (GPU)
#: CUDA source of the GPU kernels; ``real_t`` is replaced by ``double`` or ``float``. One thread per
#: output cell, threads along k (contiguous) for coalesced access; the same operation order as the
#: CPU kernels, compiled with ``--fmad=false`` so that no multiply-add is fused.
CUDA_SOURCE = r"""
#define U(a, b, c) u[p + (a) * s0 + (b) * s1 + (c)]

extern "C" __global__ void hpc_stencil7(const real_t* __restrict__ u, real_t* __restrict__ out,
        const real_t c0, const real_t cx, const real_t cy, const real_t cz,
        const long long s0, const long long s1,
        const int i0, const int j0, const int k0, const int ni, const int nj, const int nk)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= ni || j >= nj || k >= nk) return;
    const long long p = (long long)(i0 + i) * s0 + (long long)(j0 + j) * s1 + (long long)(k0 + k);
    out[p] = c0 * U(0, 0, 0) + cx * (U(1, 0, 0) + U(-1, 0, 0)) + cy * (U(0, 1, 0) + U(0, -1, 0))
           + cz * (U(0, 0, 1) + U(0, 0, -1));
}

extern "C" __global__ void hpc_stencil27(const real_t* __restrict__ u, real_t* __restrict__ out,
        const real_t w0, const real_t wf, const real_t we, const real_t wc,
        const long long s0, const long long s1,
        const int i0, const int j0, const int k0, const int ni, const int nj, const int nk)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= ni || j >= nj || k >= nk) return;
    const long long p = (long long)(i0 + i) * s0 + (long long)(j0 + j) * s1 + (long long)(k0 + k);
    const real_t f = U(-1, 0, 0) + U(0, -1, 0) + U(0, 0, -1) + U(0, 0, 1) + U(0, 1, 0) + U(1, 0, 0);
    const real_t e = U(-1, -1, 0) + U(-1, 0, -1) + U(-1, 0, 1) + U(-1, 1, 0)
                   + U(0, -1, -1) + U(0, -1, 1) + U(0, 1, -1) + U(0, 1, 1)
                   + U(1, -1, 0) + U(1, 0, -1) + U(1, 0, 1) + U(1, 1, 0);
    const real_t c = U(-1, -1, -1) + U(-1, -1, 1) + U(-1, 1, -1) + U(-1, 1, 1)
                   + U(1, -1, -1) + U(1, -1, 1) + U(1, 1, -1) + U(1, 1, 1);
    out[p] = w0 * U(0, 0, 0) + wf * f + we * e + wc * c;
}
"""

CUDA_BLOCK = (32, 8, 1)      # threads along k, j, i
_CUDA = CudaSource(__name__, CUDA_SOURCE, real_types=("double", "float"))


def cuda_launch_config(shape, region) -> tuple[tuple[int, int, int], tuple[int, int, int], tuple]:
    """``(grid, block, index_args)`` of a CUDA launch over ``region`` of a C-contiguous array of
    ``shape``: the part of the argument list after the four weights. Local (no GPU needed)."""
    (i0, i1), (j0, j1), (k0, k1) = region
    ni, nj, nk = i1 - i0, j1 - j0, k1 - k0
    bx, by, bz = CUDA_BLOCK
    grid = (-(-nk // bx), -(-nj // by), -(-ni // bz))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"region {region} is too large for one CUDA launch (grid {grid})")
    s1 = shape[2]
    s0 = shape[1] * shape[2]
    args = (np.int64(s0), np.int64(s1), np.int32(i0), np.int32(j0), np.int32(k0),
            np.int32(ni), np.int32(nj), np.int32(nk))
    return grid, CUDA_BLOCK, args


def _launch_cuda(name: str, u, out, coeffs, reg, kernel=None) -> None:
    """Launch kernel ``name`` (``kernel`` replaces the compiled one, for emulation in tests)."""
    if kernel is None:
        kernel = _CUDA.function(name, u.dtype)
    grid, block, idx = cuda_launch_config(tuple(u.shape), reg)
    t = u.dtype.type                  # scalars must match the kernel's real_t exactly
    kernel(grid, block, (u, out, *(t(c) for c in coeffs), *idx))

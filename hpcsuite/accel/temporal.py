"""Temporally blocked stencil kernels: several time steps per pass over memory.

A single stencil sweep (:func:`~hpcsuite.accel.kernels.stencil7`) reads the whole field and writes
the whole field once per step, so it can never be faster than one copy of the grid per step (16-24
bytes per cell update). These kernels advance ``T`` steps while the data is in the caches
(the 2009 multicore temporal-blocking method, here as a wavefront with trapezoid tiles):

* the region is cut into tiles along ``j`` (``tile`` cells of the last step's region each); every
  tile, and the ``T - 1 - s`` extra cells on both sides that step ``s`` must also compute for the
  later steps (a trapezoid: redundant work at the tile edges, no synchronisation between tiles),
  is handled by one thread;
* along ``i`` a wavefront: at position ``w`` step ``s`` updates plane ``i = w - s``, reading
  step ``s - 1``'s planes ``i - 1, i, i + 1`` from a ring of three plane buffers per step, so
  the intermediate steps live in per-thread buffers of ``3 (T - 1)`` tile planes (sized to stay in
  the core's cache) and only the input is read from, and the last step written to, main memory.

Every cell of every step is computed by the same expression, in the same order, from the same
inputs as by :func:`~hpcsuite.accel.kernels.stencil7` / ``stencil27`` (no fastmath), so the result
equals ``T`` single sweeps bit for bit.

Semantics of ``stencil7_steps(u, out, c0, cx, cy, cz, regions)`` with ``regions = [R_0, ...,
R_{T-1}]``: level 0 is ``u``; step ``s`` applies the stencil on ``R_s`` to level ``s`` (cells outside
``R_s`` keep their level-``s`` values); ``out[R_{T-1}]`` receives level ``T``; the rest of ``out``
is left alone. The regions must be nested, and each side of each region must either stay where
``R_0`` had it for every step so far (a fixed boundary: the cells beyond it are ``u``'s) or move
inwards at every step (a deep halo being used up). This is exactly how a deep-halo solver steps
(:class:`hpcsuite.solvers.StencilSolver`), and equal to ``T`` calls of ``stencil7`` alternating
between two arrays that hold the same values outside the regions.

When blocking pays: when the field is much larger than the caches, so that a single sweep is
bound by memory bandwidth; then each cell crosses the memory bus once per ``T`` steps instead of
once per step. When the field (two copies of it) already fits in the cache, or when one thread per
core cannot saturate the memory bus, a sweep is as fast or faster: the redundant trapezoid cells
(``(T - 1) / tile`` more work per side on average) and the plane bookkeeping are then pure cost.
Choose ``T`` and ``tile`` by timing (the solver does).

Implementations as for the single sweeps: ``"numba"`` (NumPy arrays; threads over tiles),
``"portable"`` (``T`` sweeps through one scratch array: the reference), ``"cupy"`` (2.5-D
blocking: a thread block per (j, k) tile streams along i, the intermediate steps in shared
memory, :data:`CUDA_STEPS_SOURCE`; at most :data:`CUDA_MAX_STEPS` steps per launch). All
functions are local.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..runtime.cuda_modules import CudaSource
from . import kernels
from .backend import Backend

__all__ = ["stencil7_steps", "stencil27_steps", "check_step_regions", "DEFAULT_TILE", "CUDA_STEPS_SOURCE",
           "CUDA_MAX_STEPS", "CUDA_TILE", "cuda_steps_launch"]

numba = kernels.numba

#: tile width along j (cells of the last step's region) when the caller does not choose one
DEFAULT_TILE = 16


def stencil7_steps(u, out, c0: float, cx: float, cy: float, cz: float, regions, *, tile: int | None = None,
                   backend: Backend | str | None = None, impl: str | None = None) -> None:
    """``len(regions)`` steps of :func:`~hpcsuite.accel.kernels.stencil7` in one pass (module docstring).

    Local. ``u`` is not modified; ``out[regions[-1]]`` receives the last step.

    Parameters
    ----------
    u, out : 3-D arrays, same shape and dtype (float32/float64), not overlapping
    c0, cx, cy, cz : float
        As :func:`~hpcsuite.accel.kernels.stencil7`.
    regions : sequence of ((i0, i1), (j0, j1), (k0, k1))
        The region of each step (:func:`check_step_regions` says which sequences are allowed).
    tile : int >= 1, optional
        Tile width along ``j`` of the numba kernel (default :data:`DEFAULT_TILE`).
    backend, impl
        As :func:`~hpcsuite.accel.kernels.stencil7`.

    Raises
    ------
    ValueError
        What ``stencil7`` raises, regions that are not nested as required, a bad ``tile``.
    """
    how = kernels.resolve_impl(u, backend, impl)
    kernels.check_arrays(u, out, None, how)
    coeffs = kernels.check_coeffs((c0, cx, cy, cz), 4, "stencil7 coefficients (c0, cx, cy, cz)")
    regs = check_step_regions(regions, tuple(u.shape))
    _run(7, u, out, coeffs, regs, _tile(tile), how, backend)


def stencil27_steps(u, out, weights: Sequence[float], regions, *, tile: int | None = None,
                    backend: Backend | str | None = None, impl: str | None = None) -> None:
    """``len(regions)`` steps of :func:`~hpcsuite.accel.kernels.stencil27` in one pass. Local.
    Everything else as :func:`stencil7_steps`."""
    how = kernels.resolve_impl(u, backend, impl)
    kernels.check_arrays(u, out, None, how)
    w = kernels.check_coeffs(weights, 4, "stencil27 weights (centre, face, edge, corner)")
    regs = check_step_regions(regions, tuple(u.shape))
    _run(27, u, out, w, regs, _tile(tile), how, backend)


def check_step_regions(regions, shape) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """The regions as int tuples, checked; ``None`` when the last one is empty (nothing to do). Local.

    Each region must be a valid :func:`~hpcsuite.accel.kernels.normalize_region` of ``shape``;
    ``R_{s+1}`` must lie inside ``R_s``; and each side of ``R_{s+1}`` either lies where ``R_0``'s
    side is (a fixed boundary) or strictly inside ``R_s``'s (a shrinking halo).

    Raises ``ValueError`` naming the first step and side that break this.
    """
    try:
        regs = list(regions)
    except TypeError:
        raise ValueError(f"regions must be a sequence of regions, got {regions!r}") from None
    if not regs:
        raise ValueError("regions must hold at least one region (one per step)")
    out = []
    for s, r in enumerate(regs):
        n = kernels.normalize_region(r, shape)
        if n is None:
            if s == len(regs) - 1:
                return None
            raise ValueError(f"region of step {s} is empty but later steps are not: {r!r}")
        out.append(n)
    for s in range(1, len(out)):
        for d in range(3):
            (a0, b0), (a, b), (a1, b1) = out[0][d], out[s - 1][d], out[s][d]
            lo_ok = a1 == a0 == a or a1 > a
            hi_ok = b1 == b0 == b or b1 < b
            if not (lo_ok and hi_ok):
                raise ValueError(f"region of step {s} {out[s]} does not follow step {s - 1}'s {out[s - 1]} "
                                 f"along dimension {d}: each side must stay at step 0's position (a fixed "
                                 f"boundary) or move inwards at every step (a shrinking halo)")
    return tuple(out)


def _tile(tile) -> int:
    if tile is None:
        return DEFAULT_TILE
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile must be a positive integer, got {tile!r}")
    return int(tile)


def _run(kind: int, u, out, coeffs, regs, tile: int, how: str, backend) -> None:
    if regs is None:
        return
    if how == "numba":
        t = u.dtype.type
        reg = np.array(regs, dtype=np.int64)
        # the kernel reads and writes C-contiguous arrays (the buffers' layout)
        src = u if u.flags.c_contiguous else np.ascontiguousarray(u)
        dst = out if out.flags.c_contiguous else np.empty(u.shape, dtype=u.dtype)
        _nb_steps(np.int64(kind), src, dst, *(t(c) for c in coeffs), reg, np.int64(tile))
        if dst is not out:
            _assign(out, dst, regs[-1])
        return
    if how == "cupy":
        _cuda_steps(kind, u, out, coeffs, regs)
        return
    # portable: the single sweeps; level s lives in a (a copy of u), each step writes its
    # region into b and copies it back, so cells outside a step's region keep their values
    sweep = kernels.stencil7 if kind == 7 else kernels.stencil27
    args = tuple(coeffs) if kind == 7 else (tuple(coeffs),)
    if len(regs) == 1:
        sweep(u, out, *args, regs[0], backend=backend, impl=how)
        return
    a, b = _copy(u), _copy(u)
    for reg in regs[:-1]:
        sweep(a, b, *args, reg, backend=backend, impl=how)
        _assign(a, b, reg)
    sweep(a, out, *args, regs[-1], backend=backend, impl=how)


def _copy(u):
    """A copy of ``u`` in its own namespace (NumPy, CuPy, array API)."""
    if isinstance(u, np.ndarray):
        return u.copy()
    ns = u.__array_namespace__() if hasattr(u, "__array_namespace__") else None
    if ns is not None and hasattr(ns, "asarray"):
        return ns.asarray(u, copy=True)
    return u.copy()


def _assign(dst, src, reg) -> None:
    sl = tuple(slice(a, b) for a, b in reg)
    dst[sl] = src[sl]


# ---------------------------------------------------------------------- numba (CPU)
if kernels.HAVE_NUMBA:
    _jit = numba.njit(fastmath=False, cache=True, inline="always")
    _pjit = numba.njit(parallel=True, fastmath=False, cache=True)
else:  # pragma: no cover - without numba the portable path runs
    _jit = _pjit = kernels.numba.njit()


#: unsigned indices: numba wraps negative *signed* indices around at every access, which keeps
#: the inner loop from vectorising when the offsets are runtime values; every index below is a
#: valid (non-negative) position, so unsigned ones change nothing but the code
_U = numba.uint64 if kernels.HAVE_NUMBA else int


@_jit
def _plane7(d, dp, dj, dk, a, ap, aj, ak, b, bp, bj, bk, c, cp, cj, ck,
            j0, j1, k0, k1, c0, cx, cy, cz):  # pragma: no cover - compiled
    # plane dp of d (offsets dj, dk added to global j, k) from planes i-1 (a), i (b), i+1 (c).
    # Indexed directly (a row view per operand cost more than the row's arithmetic: 1.03 against
    # 0.80 ns per cell in cache, 96^3, 1 thread); the expression and its order are the single
    # sweep's (kernels._nb_stencil7), so the result is bit-identical to it.
    n = k1 - k0
    if n <= 0:
        return
    one = _U(1)
    pd, pa, pb, pc = _U(dp), _U(ap), _U(bp), _U(cp)
    kd, ka, kb0, kc = _U(k0 + dk), _U(k0 + ak), _U(k0 + bk), _U(k0 + ck)
    for j in range(j0, j1):
        jd, ja, jb, jc = _U(j + dj), _U(j + aj), _U(j + bj), _U(j + cj)
        jbp, jbm = jb + one, jb - one
        for kk in range(_U(n)):
            kb = kb0 + kk
            d[pd, jd, kd + kk] = (c0 * b[pb, jb, kb] + cx * (c[pc, jc, kc + kk] + a[pa, ja, ka + kk])
                                  + cy * (b[pb, jbp, kb] + b[pb, jbm, kb])
                                  + cz * (b[pb, jb, kb + one] + b[pb, jb, kb - one]))


@_jit
def _plane27(d, dp, dj, dk, a, ap, aj, ak, b, bp, bj, bk, c, cp, cj, ck,
             j0, j1, k0, k1, w0, wf, we, wc):  # pragma: no cover - compiled
    # plane dp of d from planes i-1 (a), i (b), i+1 (c), indexed directly with unsigned indices
    # as _plane7 (nine row views per row cost more than the row's arithmetic). The sums and their
    # order are kernels.stencil27_row's, term by term (its rows mm, m0, mp are a's rows j-1, j,
    # j+1, zm, zz, zp b's, pm, p0, pp c's; its index k + 1 + o is offset o along k here), so the
    # result is bit-identical to the single sweep.
    n = k1 - k0
    if n <= 0:
        return
    one = _U(1)
    pd, pa, pb, pc = _U(dp), _U(ap), _U(bp), _U(cp)
    kd, ka0, kb0, kc0 = _U(k0 + dk), _U(k0 + ak), _U(k0 + bk), _U(k0 + ck)
    for j in range(j0, j1):
        jd, ja, jb, jc = _U(j + dj), _U(j + aj), _U(j + bj), _U(j + cj)
        jam, jap, jbm, jbp, jcm, jcp = ja - one, ja + one, jb - one, jb + one, jc - one, jc + one
        for kk in range(_U(n)):
            ka, kb, kc = ka0 + kk, kb0 + kk, kc0 + kk
            kam, kap, kbm, kbp, kcm, kcp = ka - one, ka + one, kb - one, kb + one, kc - one, kc + one
            f = (a[pa, ja, ka] + b[pb, jbm, kb] + b[pb, jb, kbm] + b[pb, jb, kbp] + b[pb, jbp, kb]
                 + c[pc, jc, kc])
            e = (a[pa, jam, ka] + a[pa, ja, kam] + a[pa, ja, kap] + a[pa, jap, ka]
                 + b[pb, jbm, kbm] + b[pb, jbm, kbp] + b[pb, jbp, kbm] + b[pb, jbp, kbp]
                 + c[pc, jcm, kc] + c[pc, jc, kcm] + c[pc, jc, kcp] + c[pc, jcp, kc])
            cr = (a[pa, jam, kam] + a[pa, jam, kap] + a[pa, jap, kam] + a[pa, jap, kap]
                  + c[pc, jcm, kcm] + c[pc, jcm, kcp] + c[pc, jcp, kcm] + c[pc, jcp, kcp])
            d[pd, jd, kd + kk] = w0 * b[pb, jb, kb] + wf * f + we * e + wc * cr


@_jit
def _ring(d, dp, dj, dk, u, i, j0, j1, k0, k1, jlo, jhi):  # pragma: no cover - compiled
    """Copy u's cells around the computed rectangle [j0, j1) x [k0, k1) of plane i into buffer
    plane dp: the fixed-boundary values a later step may read. ``jlo``/``jhi``: the step's region
    along j; a row beyond a tile edge inside the region is never read (the next step's rows
    stay one cell inside this step's), so only rows at the region's edges are copied."""
    if j0 == jlo:
        for k in range(k0 - 1, k1 + 1):
            d[dp, j0 - 1 + dj, k + dk] = u[i, j0 - 1, k]
    if j1 == jhi:
        for k in range(k0 - 1, k1 + 1):
            d[dp, j1 + dj, k + dk] = u[i, j1, k]
    for j in range(j0, j1):
        d[dp, j + dj, k0 - 1 + dk] = u[i, j, k0 - 1]
        d[dp, j + dj, k1 + dk] = u[i, j, k1]


@_pjit
def _nb_steps(kind, u, out, w0, w1, w2, w3, reg, tile):  # pragma: no cover - compiled
    """kind 7 or 27; reg: int64 (T, 3, 2) step regions; tile: tile width along j."""
    T = reg.shape[0]
    jlo, jhi = reg[T - 1, 1, 0], reg[T - 1, 1, 1]
    ntile = (jhi - jlo + tile - 1) // tile
    kw0, kw1 = reg[0, 2, 0] - 1, reg[0, 2, 1] + 1          # the k window: R_0 and one cell
    nj = u.shape[1]
    wlo = reg[0, 0, 0]
    whi = wlo
    for s in range(T):
        whi = max(whi, reg[s, 0, 1] + s)
    nbuf = max(T - 1, 1) * 3
    for t in numba.prange(ntile):
        jb0 = jlo + t * tile
        jb1 = min(jb0 + tile, jhi)
        jw0, jw1 = max(jb0 - T, 0), min(jb1 + T, nj)         # the j window of this tile
        buf = np.empty((nbuf, jw1 - jw0, kw1 - kw0), dtype=u.dtype)
        oj, ok = -jw0, -kw0                                  # buffer index = global index + offset
        for w in range(wlo, whi):
            for s in range(T):
                i = w - s
                if i < reg[s, 0, 0] or i >= reg[s, 0, 1]:
                    continue
                j0 = max(reg[s, 1, 0], jb0 - (T - 1 - s))
                j1 = min(reg[s, 1, 1], jb1 + (T - 1 - s))
                if j1 <= j0:
                    continue
                k0, k1 = reg[s, 2, 0], reg[s, 2, 1]
                # sources: level s planes i-1, i, i+1 (u's planes where level s was not computed)
                a, ap, aj, ak = u, i - 1, 0, 0
                b, bp, bj, bk = u, i, 0, 0
                c, cp, cj, ck = u, i + 1, 0, 0
                if s > 0:
                    lo, hi = reg[s - 1, 0, 0], reg[s - 1, 0, 1]
                    base = (s - 1) * 3
                    if lo <= i - 1 < hi:
                        a, ap, aj, ak = buf, base + (i - 1) % 3, oj, ok
                    if lo <= i < hi:
                        b, bp, bj, bk = buf, base + i % 3, oj, ok
                    if lo <= i + 1 < hi:
                        c, cp, cj, ck = buf, base + (i + 1) % 3, oj, ok
                if s == T - 1:
                    d, dp, dj, dk = out, i, 0, 0
                else:
                    d, dp, dj, dk = buf, s * 3 + i % 3, oj, ok
                if kind == 7:
                    _plane7(d, dp, dj, dk, a, ap, aj, ak, b, bp, bj, bk, c, cp, cj, ck,
                            j0, j1, k0, k1, w0, w1, w2, w3)
                else:
                    _plane27(d, dp, dj, dk, a, ap, aj, ak, b, bp, bj, bk, c, cp, cj, ck,
                             j0, j1, k0, k1, w0, w1, w2, w3)
                if s < T - 1:
                    _ring(buf, dp, oj, ok, u, i, j0, j1, k0, k1, reg[s, 1, 0], reg[s, 1, 1])


# ---------------------------------------------------------------------- CUDA (GPU)
#: Most steps one CUDA launch takes (the shared memory holds 3 planes of each intermediate step).
CUDA_MAX_STEPS = 4
#: Threads per block along k and j: the tile of the first step; the last step's tile is
#: ``2 (T - 1)`` cells narrower in each direction (the trapezoid).
CUDA_TILE = (32, 16)

#: 2.5-D temporal blocking: each thread block owns a (j, k) tile and streams along i; at wavefront
#: position w step s updates plane i = w - s of its tile, reading step s - 1's planes i - 1, i,
#: i + 1 from a ring of three shared-memory planes per intermediate step (level 0 from global
#: memory), and the last step writes to global memory. Each cell: the expression of
#: kernels.CUDA_SOURCE in the same order, --fmad=false: identical to T single sweeps.
#: The HPC_* macros let the same source run in the CPU emulation of the tests (g++, threads of a
#: block in turn): there one thread runs every thread's share of each phase between barriers, so
#: nothing but shared memory carries values across a barrier.
CUDA_STEPS_SOURCE = r"""
#define TBX 32
#define TBY 16
#define MAXT 4
#define HPC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HPC_MAX(a, b) ((a) > (b) ? (a) : (b))
#ifdef __CUDACC__
#define HPC_SHARED __shared__
#define HPC_SYNC __syncthreads()
#define HPC_ONE_THREAD_RUNS_ALL
#define HPC_FOR_THREADS { const int tx = threadIdx.x, ty = threadIdx.y; {
#define HPC_END_THREADS } }
#else
#define HPC_SHARED static
#define HPC_SYNC
#define HPC_ONE_THREAD_RUNS_ALL if (threadIdx.x || threadIdx.y || threadIdx.z) return;
#define HPC_FOR_THREADS for (int ty = 0; ty < TBY; ++ty) for (int tx = 0; tx < TBX; ++tx) {
#define HPC_END_THREADS }
#endif

// level s (s >= 1) of cell (p, j, k): the shared ring where step s - 1 computed it, else u
// (cells outside the region of step s - 1: fixed boundary values)
#define LEVEL(p, j, k) ((s > 0 && (p) >= rg[6 * (s - 1)] && (p) < rg[6 * (s - 1) + 1] \
    && (j) >= jw[s - 1][0] && (j) < jw[s - 1][1] && (k) >= kw[s - 1][0] && (k) < kw[s - 1][1]) \
    ? sh[s - 1][(p) % 3][(j) - jorg][(k) - korg] \
    : u[(long long)(p) * s0 + (long long)(j) * s1 + (long long)(k)])

#define STEPS_PROLOGUE \
    HPC_ONE_THREAD_RUNS_ALL \
    HPC_SHARED real_t sh[MAXT - 1][3][TBY][TBX]; \
    int rg[6 * MAXT]; \
    for (int q = 0; q < 6 * T; ++q) rg[q] = reg[q]; \
    const int tj = TBY - 2 * (T - 1), tk = TBX - 2 * (T - 1); \
    const int jt0 = rg[6 * (T - 1) + 2] + blockIdx.y * tj, kt0 = rg[6 * (T - 1) + 4] + blockIdx.x * tk; \
    const int jorg = jt0 - (T - 1), korg = kt0 - (T - 1); \
    int jw[MAXT][2], kw[MAXT][2]; /* cells step s computes in this tile */ \
    for (int s = 0; s < T; ++s) { \
        const int m = T - 1 - s; \
        jw[s][0] = HPC_MAX(rg[6 * s + 2], jt0 - m); jw[s][1] = HPC_MIN(rg[6 * s + 3], jt0 + tj + m); \
        kw[s][0] = HPC_MAX(rg[6 * s + 4], kt0 - m); kw[s][1] = HPC_MIN(rg[6 * s + 5], kt0 + tk + m); \
    } \
    int whi = rg[0]; \
    for (int s = 0; s < T; ++s) whi = HPC_MAX(whi, rg[6 * s + 1] + s);

#define STEPS_LOOP(EXPR) \
    for (int w = rg[0]; w < whi; ++w) { \
        for (int s = 0; s < T; ++s) { \
            const int i = w - s; \
            if (i >= rg[6 * s] && i < rg[6 * s + 1]) { \
                HPC_FOR_THREADS \
                    const int j = jorg + ty, k = korg + tx; \
                    if (j >= jw[s][0] && j < jw[s][1] && k >= kw[s][0] && k < kw[s][1]) { \
                        const real_t v = EXPR; \
                        if (s == T - 1) out[(long long)i * s0 + (long long)j * s1 + k] = v; \
                        else sh[s][i % 3][ty][tx] = v; \
                    } \
                HPC_END_THREADS \
            } \
            HPC_SYNC; \
        } \
    }

#define L(a, b, c) LEVEL(i + (a), j + (b), k + (c))

extern "C" __global__ void hpc_steps7(const real_t* __restrict__ u, real_t* __restrict__ out,
        const real_t c0, const real_t cx, const real_t cy, const real_t cz,
        const long long s0, const long long s1, const int* __restrict__ reg, const int T)
{
    STEPS_PROLOGUE
    STEPS_LOOP(c0 * L(0, 0, 0) + cx * (L(1, 0, 0) + L(-1, 0, 0)) + cy * (L(0, 1, 0) + L(0, -1, 0))
               + cz * (L(0, 0, 1) + L(0, 0, -1)))
}

extern "C" __global__ void hpc_steps27(const real_t* __restrict__ u, real_t* __restrict__ out,
        const real_t w0, const real_t wf, const real_t we, const real_t wc,
        const long long s0, const long long s1, const int* __restrict__ reg, const int T)
{
    STEPS_PROLOGUE
    STEPS_LOOP(w0 * L(0, 0, 0)
               + wf * (L(-1, 0, 0) + L(0, -1, 0) + L(0, 0, -1) + L(0, 0, 1) + L(0, 1, 0) + L(1, 0, 0))
               + we * (L(-1, -1, 0) + L(-1, 0, -1) + L(-1, 0, 1) + L(-1, 1, 0)
                       + L(0, -1, -1) + L(0, -1, 1) + L(0, 1, -1) + L(0, 1, 1)
                       + L(1, -1, 0) + L(1, 0, -1) + L(1, 0, 1) + L(1, 1, 0))
               + wc * (L(-1, -1, -1) + L(-1, -1, 1) + L(-1, 1, -1) + L(-1, 1, 1)
                       + L(1, -1, -1) + L(1, -1, 1) + L(1, 1, -1) + L(1, 1, 1)))
}
"""
_CUDA = CudaSource(__name__, CUDA_STEPS_SOURCE, real_types=("double", "float"))


def cuda_steps_launch(shape, regs) -> tuple[tuple[int, int, int], tuple[int, int, int], tuple, np.ndarray]:
    """``(grid, block, index_args, reg)`` of one blocked CUDA launch over ``regs`` (at most
    :data:`CUDA_MAX_STEPS`) of a C-contiguous array of ``shape``; ``reg`` is the int32 ``T x 6``
    region table to copy to the device (passed after the strides). Local (no GPU needed)."""
    T = len(regs)
    if not 1 <= T <= CUDA_MAX_STEPS:
        raise ValueError(f"one blocked CUDA launch takes 1 to {CUDA_MAX_STEPS} steps, got {T}")
    (_, _), (j0, j1), (k0, k1) = regs[-1]
    tk, tj = CUDA_TILE[0] - 2 * (T - 1), CUDA_TILE[1] - 2 * (T - 1)
    grid = (-(-(k1 - k0) // tk), -(-(j1 - j0) // tj), 1)
    reg = np.array([x for r in regs for pair in r for x in pair], dtype=np.int32)
    args = (np.int64(shape[1] * shape[2]), np.int64(shape[2]))
    return grid, (CUDA_TILE[0], CUDA_TILE[1], 1), args, reg


def _cuda_steps(kind: int, u, out, coeffs, regs, kernel=None) -> None:
    """T blocked steps on CuPy arrays: launches of at most CUDA_MAX_STEPS steps (``kernel``
    replaces the compiled one, for emulation in tests)."""
    import cupy
    t = u.dtype.type
    name = f"hpc_steps{kind}"
    if kernel is None:
        kernel = _CUDA.function(name, u.dtype)
    chunks = [regs[a:a + CUDA_MAX_STEPS] for a in range(0, len(regs), CUDA_MAX_STEPS)]
    src = u
    scratch = None
    if len(chunks) > 1:
        scratch = [u.copy(), u.copy()]       # outside the regions: u's values, as the semantics need
    for n, chunk in enumerate(chunks):
        dst = out if n == len(chunks) - 1 else scratch[n % 2]
        grid, block, idx, reg = cuda_steps_launch(tuple(u.shape), chunk)
        kernel(grid, block, (src, dst, *(t(c) for c in coeffs), *idx, cupy.asarray(reg), np.int32(len(chunk))))
        src = dst


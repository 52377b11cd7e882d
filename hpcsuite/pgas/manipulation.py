"""Shape manipulation of :class:`~hpcsuite.pgas.DistArray` with NumPy's signatures:
``transpose``, ``reshape``, ``concatenate``, and ``matmul`` through SUMMA.

All are collective and check their arguments from global metadata before any communication.
DistArrays have no views: each returns a new array (freed when its last reference goes).
"""
from __future__ import annotations

import math
import operator

import numpy as np
from mpi4py import MPI

from .arith import check_dist, local_part, new_array
from .array import DistArray, empty, mpi_type
from .dist import BLOCKED, NONE
from .pattern import Pattern
from .redistribute import copy as redistribute
from .summa import matmul as summa

__all__ = ["transpose", "reshape", "concatenate", "matmul"]


def _perm(axes, ndim: int, func: str) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))[::-1]
    try:
        perm = tuple(operator.index(x) for x in axes)
    except TypeError:
        raise TypeError(f"{func}: axes must be a sequence of ints, got {axes!r}") from None
    if len(perm) != ndim:
        raise ValueError(f"{func}: axes {axes!r} don't match a {ndim}-D array")
    perm = tuple(x % ndim if -ndim <= x < ndim else x for x in perm)
    if sorted(perm) != list(range(ndim)):
        raise ValueError(f"{func}: axes {axes!r} are not a permutation of the {ndim} axes")
    return perm


def transpose(a, axes=None) -> DistArray:
    """``numpy.transpose(a, axes)``: the axes permuted. Collective.

    The result's pattern is ``a``'s with its distribution specs and process-grid extents
    permuted alike, so every block stays whole: a rank transposes its block locally and, where
    the permuted grid numbers the block's owner differently (a process grid split along more than
    one axis), sends it to that rank with one ``Sendrecv`` (a permutation of the ranks). Nothing
    moves when at most one grid extent exceeds 1.
    """
    check_dist(a, "numpy.transpose")
    perm = _perm(axes, a.ndim, "numpy.transpose")
    p = a.pattern
    r = new_array(tuple(a.shape[k] for k in perm), a.dtype, a, dist=tuple(p.dist[k] for k in perm),
                  grid=tuple(p.grid[k] for k in perm))
    rank = a.team.rank
    coords = p.unit_coords(rank)
    dest = r.pattern.unit_of([coords[k] for k in perm])
    rc = r.pattern.unit_coords(rank)
    src_coords = [0] * a.ndim
    for k, d in enumerate(perm):
        src_coords[d] = rc[k]
    src = p.unit_of(src_coords)
    block = p.storage_to_local(a.local).transpose(perm)
    if dest == rank:
        r.local[...] = r.pattern.local_to_storage(block)
        return r
    dev = a.device
    send = np.ascontiguousarray(dev.to_host(block))
    recv = np.empty(r.pattern.local_shape(rank), a.dtype)
    a.team.Sendrecv(send, dest, recv, src)
    r.local[...] = dev.asarray(r.pattern.local_to_storage(recv)) if dev.is_gpu else \
        r.pattern.local_to_storage(recv)
    return r


def _new_shape(shape, size: int, func: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"{func}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if shape.count(-1) > 1 or any(n < -1 for n in shape):
        raise ValueError(f"{func}: bad shape {shape}")
    if -1 in shape:
        rest = math.prod(n for n in shape if n != -1)
        if rest == 0 or size % rest:
            raise ValueError(f"{func}: cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // rest if n == -1 else n for n in shape)
    if math.prod(shape) != size:
        raise ValueError(f"{func}: cannot reshape array of size {size} into shape {shape}")
    return shape


def reshape(a, shape=None, order="C", *, newshape=None, copy=None) -> DistArray:
    """``numpy.reshape(a, shape)`` where no element changes owner. Collective, no communication.

    Allowed: the dimensions up to and including the last distributed one (process-grid extent
    above 1, or a cyclic / tiled spec) stay as they are, and only the trailing, undistributed
    ones are reshaped (e.g. ``(n, 4, 5)`` -> ``(n, 20)`` with dimension 0 distributed). The
    result keeps those leading specs and grid extents; its new trailing dimensions are ``NONE``.
    Anything else raises ``ValueError`` saying so (:func:`~hpcsuite.pgas.copy` into an array of
    another distribution first). ``order`` must be ``"C"``; ``copy=False`` raises (there are no
    views).
    """
    check_dist(a, "numpy.reshape")
    if shape is None:
        shape = newshape
    if shape is None:
        raise TypeError("numpy.reshape: shape is required")
    if order != "C":
        raise TypeError(f"numpy.reshape on DistArrays: only order='C', got {order!r}")
    if copy is False:
        raise ValueError("numpy.reshape: DistArrays have no views; copy=False cannot be honoured")
    shape = _new_shape(shape, a.size, "numpy.reshape")
    p = a.pattern
    dist_dims = [d for d, (s, g) in enumerate(zip(p.dist, p.grid)) if g > 1 or s.kind != "none"]
    k = dist_dims[-1] + 1 if dist_dims else 0
    if p.tiled or tuple(shape[:k]) != a.shape[:k]:
        raise ValueError(f"numpy.reshape: {a.shape} -> {shape} would move elements between ranks; only "
                         f"the dimensions after the last distributed one ({k - 1}) may change (use "
                         f"pgas.copy into another distribution first)")
    r = new_array(shape, a.dtype, a, dist=p.dist[:k] + (NONE,) * (len(shape) - k),
                  grid=p.grid[:k] + (1,) * (len(shape) - k))
    r.local[...] = a.local.reshape(r.local.shape)
    return r


def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind") -> DistArray:
    """``numpy.concatenate(arrays, axis)`` along an axis the process grid does not split.
    Collective.

    The result has the first array's pattern (``NONE`` along ``axis``). Arrays laid out like it
    along the other axes are joined locally; the others are redistributed once into that layout.
    ``axis=None`` (flattening) and an ``axis`` the first array distributes raise ``TypeError`` /
    ``ValueError``; so do non-DistArray inputs, shapes that differ off ``axis``, other teams or
    devices.
    """
    func = "numpy.concatenate"
    arrays = list(arrays)
    if not arrays:
        raise ValueError(f"{func}: need at least one array to concatenate")
    for x in arrays:
        check_dist(x, func, "every array")
    first = arrays[0]
    nd = first.ndim
    if axis is None:
        raise TypeError(f"{func} on DistArrays: axis=None (flattening) is not supported")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{func}: axis must be an int, got {axis!r}")
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(int(axis), nd)
    axis = int(axis) % nd
    p = first.pattern
    if p.grid[axis] != 1 or p.dist[axis].kind not in ("none", "blocked"):
        raise ValueError(f"{func}: axis {axis} is distributed ({p.dist[axis]!r} over {p.grid[axis]} "
                         f"units); DistArrays concatenate only along an undistributed axis")
    for x in arrays[1:]:
        if x.ndim != nd or any(x.shape[d] != first.shape[d] for d in range(nd) if d != axis):
            raise ValueError(f"{func}: shapes {first.shape} and {x.shape} differ off axis {axis}")
        if x.team.comm.Compare(first.team.comm) not in (MPI.IDENT, MPI.CONGRUENT) or x.device.is_gpu != first.device.is_gpu:
            raise ValueError(f"{func}: the arrays must live on the same team and device")
    dt = np.dtype(dtype) if dtype is not None else np.result_type(*(x.dtype for x in arrays))
    for x in arrays:
        if not np.can_cast(x.dtype, dt, casting):
            raise TypeError(f"{func}: cannot cast {x.dtype} to {dt} with casting={casting!r}")
    dist = p.dist[:axis] + (NONE,) + p.dist[axis + 1:]
    total = sum(x.shape[axis] for x in arrays)
    shape = first.shape[:axis] + (total,) + first.shape[axis + 1:]
    if out is not None:
        check_dist(out, func, "out")
        if out.shape != shape:
            raise ValueError(f"{func}: out has shape {out.shape}, the result has shape {shape}")
    r = new_array(shape, dt, first, dist=dist, grid=p.grid)
    temps, blocks = [], []
    try:
        for x in arrays:
            want = empty(x.shape, x.dtype, dist=dist, team=first.team, grid=p.grid, device=first.device) \
                if not _fits(x, dist, p.grid) else None
            if want is not None:
                temps.append(want)
                redistribute(x, want)
                x = want
            blocks.append(x.pattern.storage_to_local(x.local))
        xp = first.device.xp
        r.local[...] = r.pattern.local_to_storage(xp.concatenate(blocks, axis=axis).astype(dt, copy=False))
    finally:
        for t in temps:
            t.free()
    if out is not None:
        redistribute(r, out)
        r.free()
        return out
    return r


def _fits(x: DistArray, dist, grid) -> bool:
    """Whether ``x`` is laid out as ``dist`` on ``grid`` along every axis (its own extents)."""
    return x.pattern == Pattern(x.shape, dist, team=x.team, grid=grid)


def matmul(a, b, out=None, **kwargs) -> DistArray:
    """``a @ b`` for 2-D DistArrays through SUMMA (:func:`hpcsuite.pgas.matmul`). Collective.

    The result has ``a``'s row and ``b``'s column distribution on ``a``'s grid (see
    :func:`hpcsuite.pgas.matmul`). One case skips SUMMA: only the inner dimension distributed, alike
    in both (``a.T @ b`` of two row-distributed arrays, a Gram matrix): each rank multiplies its
    blocks and one ``Allreduce`` sums the products; the result then has its rows BLOCKED over the
    team. Other ranks (1-D, stacks of matrices), non-DistArray operands and keywords other than
    ``out`` raise ``TypeError``.
    """
    func = "numpy.matmul"
    if kwargs:
        raise TypeError(f"{func} on DistArrays: keyword(s) {', '.join(sorted(kwargs))} not supported")
    check_dist(a, func, "x1")
    check_dist(b, func, "x2")
    if isinstance(out, tuple):
        out = out[0]
    if a.ndim != 2 or b.ndim != 2:
        raise TypeError(f"{func} on DistArrays: only 2-D @ 2-D (SUMMA), got {a.ndim}-D @ {b.ndim}-D")
    if out is None and _inner_split(a, b):
        return _matmul_inner(a, b)
    try:
        r = summa(a, b, out=out)
    except ValueError as exc:
        raise ValueError(str(exc).replace("matmul:", f"{func}:", 1)) from None
    if out is None:
        r.auto_free = True
    return r


def _inner_split(a: DistArray, b: DistArray) -> bool:
    """Whether only the inner dimension is distributed, the same way in ``a`` and ``b``, with a
    dtype MPI can sum. Local (global metadata only)."""
    pa, pb = a.pattern, b.pattern
    if pa.tiled or pb.tiled or pa.grid[0] != 1 or pb.grid[1] != 1 or (pa.grid[1] == 1 and a.team.size > 1):
        return False                    # (one unit: a plain local product)
    if a.team.comm.Compare(b.team.comm) not in (MPI.IDENT, MPI.CONGRUENT) or a.shape[1] != b.shape[0]:
        return False
    if a.device.is_gpu != b.device.is_gpu:
        return False
    dt = np.result_type(a.dtype, b.dtype)
    return dt.kind in "iufc" and pa.maps[1].same_as(pb.maps[0])


def _matmul_inner(a: DistArray, b: DistArray) -> DistArray:
    """``a @ b`` with the inner dimension split alike: local products, then each rank sums only its
    own rows of the products (a reduce-scatter as one ``Alltoallv`` of row blocks plus a local sum
    in rank order: half the data of an ``Allreduce`` of the whole product at 2 ranks, ``1/p`` of
    the summing); the result has its rows BLOCKED over the team. Collective."""
    dt = np.result_type(a.dtype, b.dtype)
    dev = a.device
    part = a.local.astype(dt, copy=False) @ b.local.astype(dt, copy=False)
    r = new_array((a.shape[0], b.shape[1]), dt, a, dist=(BLOCKED, NONE), grid=None)
    team = a.team
    if team.size == 1:
        r.local[...] = part
        return r
    full = np.ascontiguousarray(dev.to_host(part), dtype=dt)
    ncol = b.shape[1]
    rows = r.pattern.maps[0]
    coord = [r.pattern.unit_coords(k)[0] for k in range(team.size)]
    counts = [rows.size(c) * ncol for c in coord]
    displs = [rows.start(c) * ncol if rows.size(c) else 0 for c in coord]
    mine = counts[team.rank]
    recv = np.empty((team.size, mine), dt)
    t = mpi_type(dt)
    team.Alltoallv([full, counts, displs, t], [recv, [mine] * team.size, [k * mine for k in range(team.size)], t])
    total = np.add.reduce(recv, axis=0)     # rank order: the same sum wherever it is made
    r.local[...] = (dev.asarray(total) if dev.is_gpu else total).reshape(r.local.shape)
    return r

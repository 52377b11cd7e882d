"""Distributed sorting and prefix scans of :class:`~hpcsuite.pgas.DistArray` (collective).

``sort`` is a sample sort (regular sampling, as PSRS): every unit sorts its block, a few regularly
spaced samples from every unit choose ``p - 1`` splitters, one ``Alltoallv`` sends each unit the
elements between two splitters, and each unit merges what it received. Equal values are told
apart by where they came from (value, unit, position), so duplicates, even an all-equal array,
still spread evenly. A second ``Alltoallv`` puts the sorted sequence back into the array's own
distribution: element ``i`` of the sorted sequence lands where global index ``i`` lives. Memory per
unit is its share of the array plus at most ``min(p**2, n / 2)`` samples; no unit ever holds the
whole array.

``scan`` computes inclusive or exclusive prefix reductions in global row-major order. 1-D arrays
are scanned where they are, whatever their distribution: a local ``accumulate`` per run of
consecutive indices, plus an ``exscan`` (and, for block-cyclic layouts, an ``allreduce``) of run
totals, so no element moves and no temporary array is allocated. N-D arrays scan along ``axis``,
through a temporary that leaves ``axis`` undistributed unless the array already does.

GPU arrays (``device="gpu"``) scan ``"sum"`` / ``"prod"`` (``numpy.add`` / ``numpy.multiply``) on
the device: the local part with the array module's ``cumsum`` / ``cumprod``, the prefix combined
there too; only the per-block totals (one element per block) cross to the host for the MPI
exscan / allreduce, and what comes before each block goes back. Other ops stage the local block
through the host (CuPy's ``ufunc.accumulate`` implements add and multiply only): one copy down,
the host scan, one copy up. The result is on the array's device either way.

Examples
--------
With ``mpiexec -n 4``::

    >>> a = pgas.from_numpy(np.array([5, 3, 3, 9, 0, 1, 7]), dist=pgas.CYCLIC, root=None)
    >>> sort(a).to_numpy()                    # every rank: array([0, 1, 3, 3, 5, 7, 9])
    >>> cumsum(a).to_numpy()                  # array([ 0,  1,  4,  7, 12, 19, 28])
    >>> scan(a, "max", exclusive=True)[1:3]   # array([0, 1])
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..runtime.comm_hooks import observed
from .algorithms import check_array, check_same, resolve_op
from .array import DistArray, empty, mpi_type
from .dist import BLOCKED, NONE
from .redistribute import copy

__all__ = ["sort", "scan", "cumsum"]

_SORTABLE_KINDS = "biufc"


# ---------------------------------------------------------------------- sort
def _check_sort(a, descending) -> None:
    check_array(a, "sort")
    if a.ndim != 1:
        raise ValueError(f"sort: a must be 1-D, got a {a.ndim}-D array of shape {a.shape}")
    if a.dtype.kind not in _SORTABLE_KINDS:
        raise ValueError(f"sort: a must have a boolean, integer, floating or complex dtype, got {a.dtype}")
    if not isinstance(descending, (bool, np.bool_)):
        raise ValueError(f"sort: descending must be True or False, got {descending!r}")


def sort(a: DistArray, descending: bool = False) -> DistArray:
    """Sort the elements of a 1-D array in place, keeping its distribution. Collective.

    Parameters
    ----------
    a : DistArray
        1-D, any distribution (BLOCKED, CYCLIC, BLOCKCYCLIC, TILE), any extents (empty blocks and
        more units than elements included). NaNs sort last, as in ``numpy.sort``.
    descending : bool
        Largest first (``numpy.sort(x)[::-1]``).

    Returns
    -------
    DistArray
        ``a``, whose global index ``i`` now holds element ``i`` of the sorted sequence.

    Raises
    ------
    ValueError
        On every rank, before communicating, if ``a`` is not 1-D, has a dtype other than
        bool/int/float/complex, or ``descending`` is not a bool.
    """
    _check_sort(a, descending)
    if a.size <= 1:
        return a
    keys = np.sort(a.local, axis=None)           # TILE storage is (tiles, tile): flattened
    if a.team.size == 1:
        a.local[...] = a.pattern.local_to_storage(keys[::-1] if descending else keys)
        return a
    counts = _partition(keys, a)
    merged = np.sort(_exchange(keys, counts, a), kind="stable")   # runs from each unit: a merge
    _place_back(a, merged, bool(descending))
    a.team.barrier()                              # every unit's block is final before any reads
    return a


def _splitters(keys: np.ndarray, a: DistArray):
    """``p - 1`` splitters as arrays (value, unit, position), from regular samples of the sorted
    blocks: every ``w``-th element of the blocks laid end to end, ``w >= 2`` chosen so that there
    are at most ``p**2`` samples and never more than half the array."""
    team, n, p = a.team, a.size, a.team.size
    w = max(2, -(-n // (p * p)))
    sizes = [a.pattern.local_size(u) for u in range(p)]          # closed form, no messages
    offs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    positions = [np.arange((w - 1 - o) % w, s, w) for o, s in zip(offs, sizes)]
    vals = np.concatenate(team.allgather(keys[positions[team.rank]]))
    units = np.repeat(np.arange(p), [len(x) for x in positions])
    spos = np.concatenate(positions)
    # the samples arrive in (unit, position) order, so a stable sort by value orders them by
    # the full key (value, unit, position); n >= 2 gives at least one sample
    order = np.argsort(vals, kind="stable")
    pick = order[np.maximum(np.arange(1, p) * len(vals) // p - 1, 0)]
    return vals[pick], units[pick], spos[pick]


def _partition(keys: np.ndarray, a: DistArray) -> np.ndarray:
    """How many of my sorted ``keys`` go to each unit: bucket ``k`` holds the keys above splitter
    ``k - 1`` and up to splitter ``k``, comparing (value, unit, position)."""
    sv, su, sp = _splitters(keys, a)
    lo = np.searchsorted(keys, sv, side="left")
    hi = np.searchsorted(keys, sv, side="right")
    me = a.team.rank
    # my copies of a splitter's value are below it when I come before its unit, above it after
    cut = np.where(su > me, hi, np.where(su < me, lo, np.clip(sp + 1, lo, hi)))
    return np.diff(np.concatenate(([0], cut, [keys.size]))).astype(np.int64)


def _displs(counts: np.ndarray) -> list[int]:
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64).tolist()


def _exchange(keys: np.ndarray, counts: np.ndarray, a: DistArray) -> np.ndarray:
    """Send bucket ``k`` of my keys to unit ``k``; return what every unit sent me (unit order)."""
    team = a.team
    rcounts = np.empty(team.size, dtype=np.int64)
    # Team has no Alltoall wrapper: through the interception point directly (the tuner sees it)
    observed(team, "Alltoall", counts.nbytes, team.comm.Alltoall, counts, rcounts)
    recv = np.empty(int(rcounts.sum()), dtype=a.dtype)
    team.Alltoallv([keys, counts.tolist(), _displs(counts), a.mpitype],
                   [recv, rcounts.tolist(), _displs(rcounts), a.mpitype])
    return recv


def _place_back(a: DistArray, merged: np.ndarray, descending: bool) -> None:
    """Move sorted element ``k`` (global rank in the sorted order) to global index ``k`` (or
    ``n - 1 - k`` descending) of ``a``'s own distribution. One ``Alltoallv``."""
    team, n, dmap = a.team, a.size, a.pattern.maps[0]
    sizes = np.array(team.allgather(merged.size), dtype=np.int64)
    offs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    # the global index range [lo, hi) each unit's sorted run lands in
    lo, hi = (n - offs - sizes, n - offs) if descending else (offs, offs + sizes)
    vals = merged[::-1] if descending else merged
    g = lo[team.rank] + np.arange(vals.size)     # increasing global indices of my run
    owner = np.asarray(dmap.owner(g), dtype=np.int64)   # 1-D: the unit is the grid coordinate
    order = np.argsort(owner, kind="stable")      # grouped by owner, increasing index within
    scounts = np.bincount(owner, minlength=team.size).astype(np.int64)
    # I receive, from each unit, the part of its run that I own: consecutive in my local order
    owned = a.pattern.owned_indices(team.rank)[0]
    first = np.searchsorted(owned, lo)
    rcounts = (np.searchsorted(owned, hi) - first).astype(np.int64)
    recv = np.empty(owned.size, dtype=a.dtype)
    team.Alltoallv([np.ascontiguousarray(vals[order]), scounts.tolist(), _displs(scounts), a.mpitype],
                   [recv, rcounts.tolist(), first.astype(np.int64).tolist(), a.mpitype])
    a.local[...] = a.pattern.local_to_storage(recv)


# ---------------------------------------------------------------------- scan
def _scan_axis(a: DistArray, axis) -> int:
    nd = a.ndim
    if axis is None:
        if nd == 1:
            return 0
        raise ValueError(f"scan: axis is required for a {nd}-D array (an int in [{-nd}, {nd}))")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)) or not -nd <= axis < nd:
        raise ValueError(f"scan: axis must be an int in [{-nd}, {nd}) for a {nd}-D array, got {axis!r}")
    return int(axis) % nd


def _scan_dtype(op, fn, dtype) -> np.dtype:
    """The result dtype: ``numpy.cumsum`` / ``numpy.cumprod``'s for "sum" / "prod" (small
    integers promoted), else the ufunc's accumulate dtype."""
    probe = np.zeros(1, dtype)
    try:
        if isinstance(op, str) and op == "sum":
            return np.cumsum(probe).dtype
        if isinstance(op, str) and op == "prod":
            return np.cumprod(probe).dtype
        return fn.accumulate(probe).dtype
    except Exception:               # noqa: BLE001 - e.g. no loop for this dtype
        raise ValueError(f"scan: op {op!r} cannot accumulate elements of dtype {dtype}") from None


def _identity(fn, dtype: np.dtype):
    """The op's identity in ``dtype`` (what an exclusive scan starts with), or ``None``."""
    if fn in (np.minimum, np.fmin, np.maximum, np.fmax):
        low = fn in (np.maximum, np.fmax)
        if dtype.kind == "f":
            return dtype.type(-np.inf if low else np.inf)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return dtype.type(info.min if low else info.max)
        if dtype.kind == "b":
            return np.bool_(not low)
    elif fn.identity is not None:
        return np.array(fn.identity).astype(dtype)[()]
    return None


def _check_scan(a, op, exclusive, out, axis):
    check_array(a, "scan", gpu=True)
    fn = resolve_op(op, "scan")
    axis = _scan_axis(a, axis)
    if not isinstance(exclusive, (bool, np.bool_)):
        raise ValueError(f"scan: exclusive must be True or False, got {exclusive!r}")
    rdt = _scan_dtype(op, fn, a.dtype)
    ident = _identity(fn, rdt)
    if exclusive and ident is None:
        raise ValueError(f"scan: exclusive=True needs an op with an identity for dtype {rdt}; "
                         f"op {op!r} has none")
    if out is not None:
        check_array(out, "scan", "out", gpu=True)
        check_same(a, out, "scan", ("a", "out"))
    return fn, axis, rdt, ident


def _work_layout(a: DistArray, axis: int):
    """``(dist, grid)`` of an N-D array in which the scan along ``axis`` is local, or ``None``
    when ``a``'s own pattern is one (1-D arrays are always scanned in their own pattern)."""
    p = a.pattern
    if a.ndim == 1 or (p.grid[axis] == 1 and not p.tiled):
        return None
    return tuple(NONE if d == axis else BLOCKED for d in range(a.ndim)), None


#: ops whose local scan runs on a GPU array's device: the array module's function for it
_DEVICE_SCANS = {np.add: "cumsum", np.multiply: "cumprod"}


def _local_xp(device, fn):
    """The array module the local part of a scan runs in: the device's for GPU arrays and ops in
    :data:`_DEVICE_SCANS`, else NumPy (a GPU array's block is then staged through the host: CuPy's
    ``ufunc.accumulate`` implements add and multiply only)."""
    return device.xp if device.is_gpu and fn in _DEVICE_SCANS else np


def _put(xp, device, host):
    """Small host data (block totals, prefixes) where the scan computes: a copy up on the device."""
    return host if xp is np else device.asarray(host)


def _accumulate(xp, x, fn, rdt, axis: int):
    """``fn.accumulate`` along ``axis`` in ``xp`` (the device: its ``cumsum`` / ``cumprod``)."""
    if xp is np:
        return fn.accumulate(x, axis=axis, dtype=rdt)
    return getattr(xp, _DEVICE_SCANS[fn])(x, axis=axis, dtype=rdt)


def _shift(incl, first, axis: int, xp=np):
    """The exclusive scan from the inclusive one along ``axis``: ``first``, then ``incl`` shifted."""
    res = xp.empty_like(incl)
    head, body, before = ([slice(None)] * incl.ndim for _ in range(3))
    head[axis], body[axis], before[axis] = slice(0, 1), slice(1, None), slice(0, -1)
    res[tuple(head)] = first
    res[tuple(body)] = incl[tuple(before)]
    return res


def _scan_block_nd(src: DistArray, dst: DistArray, fn, axis: int, rdt, exclusive: bool, ident) -> None:
    """Scan along ``axis``, which ``src``'s pattern (also ``dst``'s) does not distribute."""
    dev = src.device
    xp = _local_xp(dev, fn)
    incl = _accumulate(xp, dev.to_host(src.local) if xp is np else src.local, fn, rdt, axis)
    dst.local[...] = dev.asarray(_shift(incl, ident, axis, xp) if exclusive else incl)


def _masked(fn):
    """``fn`` on ``(values, valid)`` pairs of vectors; where one side is invalid, the other."""
    def combine(x, y, *_):
        (vx, mx), (vy, my) = x, y
        with np.errstate(all="ignore"):           # fn also runs on the placeholders it discards
            v = np.where(mx & my, fn(vx, vy), np.where(mx, vx, vy))
        return v.astype(vx.dtype, copy=False), mx | my
    return combine


def _rounds(pattern, unit: int) -> tuple[int, int]:
    """``(block, rounds)`` of a 1-D pattern: in local order, ``unit``'s elements are consecutive
    blocks of ``block`` global indices (the last may be shorter); the global order visits the
    blocks round by round, and round ``r`` holds the ``r``-th block of unit 0, 1, ... in turn."""
    m = pattern.maps[0]
    if not m.cyclic:                              # BLOCKED / NONE: one block, one round
        return max(m.size(pattern.unit_coords(unit)[0]), 1), 1
    nblocks = -(-m.n // m.b)
    return m.b, -(-nblocks // m.p)


def _accumulate_rows(rows, fn, rdt, xp=np):
    """``fn.accumulate`` along each row. Many short rows (block-cyclic blocks) go column by column:
    NumPy's ``accumulate`` makes one inner-loop call per row, which is slow for rows of a few
    (a device ``cumsum`` / ``cumprod`` along the rows is one kernel whatever the shape)."""
    if xp is not np or rows.shape[1] >= rows.shape[0]:
        return _accumulate(xp, rows, fn, rdt, 1)
    out = rows.astype(rdt)
    for j in range(1, rows.shape[1]):
        fn(out[:, j - 1], out[:, j], out=out[:, j])
    return out


def _prefixed(rows, pv, pm, fn, rdt, exclusive: bool, ident, xp=np, device=None):
    """Blocks' own inclusive prefixes ``rows`` (one block a row, in ``xp``) combined with what
    comes before each block (host ``pv`` where ``pm``, copied to ``device`` when ``xp`` is its
    module); exclusive scans shift each row by one."""
    f = fn if xp is np else getattr(xp, fn.__name__)
    incl = rows
    if pm.any():
        with np.errstate(all="ignore"):           # fn also runs on the placeholders it discards
            incl = f(_put(xp, device, pv)[:, None], rows).astype(rdt, copy=False)
        if not pm.all():
            incl = xp.where(_put(xp, device, pm)[:, None], incl, rows)
    if not exclusive:
        return incl
    return _shift(incl, _put(xp, device, np.where(pm, pv, ident).astype(rdt))[:, None], 1, xp)


def _ufunc_op(fn, rdt) -> MPI.Op:
    """An MPI reduction op applying the ufunc ``fn`` to buffers of ``rdt`` (NumPy's semantics,
    NaNs included), operands in rank order. The caller frees it."""
    def apply(inbuf, inoutbuf, datatype):
        y = np.frombuffer(inoutbuf, dtype=rdt)
        fn(np.frombuffer(inbuf, dtype=rdt), y, out=y)
    return MPI.Op.Create(apply, commute=False)


def _before_blocks_buffers(team, totals, rounds: int, fn, rdt, ident):
    """What comes before each of my blocks, with an identity: buffer collectives, padding with it."""
    t, op = mpi_type(rdt), _ufunc_op(fn, rdt)
    try:
        before = np.full(rounds, ident, rdt)
        observed(team, "Exscan", totals.nbytes, team.comm.Exscan, [totals, t], [before, t], op=op)
        if team.rank == 0:
            before[...] = ident                   # Exscan leaves rank 0's result undefined
        if rounds > 1:
            per_round = np.empty_like(totals)
            team.Allreduce([totals, t], [per_round, t], op=op)
            earlier = np.full(rounds, ident, rdt)
            earlier[1:] = fn.accumulate(per_round, dtype=rdt)[:-1]
            before = fn(earlier, before).astype(rdt, copy=False)
    finally:
        op.Free()
    valid = np.ones(rounds, bool)
    valid[0] = team.rank != 0                    # nothing comes before the very first block
    return before, valid


def _before_blocks_objects(team, totals, valid, rounds: int, fn, rdt):
    """The same for ops without an identity: (values, valid) pairs through pickled collectives."""
    combine = _masked(fn)
    before = team.comm.exscan((totals, valid), op=combine)       # Team has no exscan wrapper
    if before is None:                            # rank 0
        before = (np.zeros(rounds, rdt), np.zeros(rounds, bool))
    if rounds > 1:
        per_round, _ = team.allreduce((totals, valid), op=combine)   # unit 0 is in every round
        earlier = np.zeros(rounds, rdt)
        earlier[1:] = fn.accumulate(per_round, dtype=rdt)[:-1]
        before = combine((earlier, np.arange(rounds) > 0), before)
    return before


def _scan_1d(src: DistArray, dst: DistArray, fn, rdt, exclusive: bool, ident) -> None:
    """1-D scan of ``src`` into ``dst`` (same pattern, any distribution), no element moved.

    What comes before a block is the total of all earlier rounds (an allreduce of per-round
    totals, then a local prefix over the rounds) combined with the earlier units' blocks of its
    own round (an exscan of the per-round totals). BLOCKED is the one-round case: one exscan.
    """
    team, pat, dev = src.team, src.pattern, src.device
    xp = _local_xp(dev, fn)
    block, rounds = _rounds(pat, team.rank)
    x = pat.storage_to_local(src.local).reshape(-1)
    if xp is np:
        x = dev.to_host(x)                        # GPU array, op not scanned there: staged
    nfull = x.size // block
    head = _accumulate_rows(x[:nfull * block].reshape(nfull, block), fn, rdt, xp)
    tail = _accumulate(xp, x[nfull * block:], fn, rdt, 0)[None, :]
    totals = np.full(rounds, 0 if ident is None else ident, rdt)
    valid = np.zeros(rounds, bool)
    # the block totals (one element per block) go to the host for MPI
    totals[:nfull], valid[:nfull] = dev.to_host(head[:, -1]), True
    if tail.size:
        totals[nfull], valid[nfull] = dev.to_host(tail[0, -1:])[0], True
    if ident is not None:
        pv, pm = _before_blocks_buffers(team, totals, rounds, fn, rdt, ident)
    else:
        pv, pm = _before_blocks_objects(team, totals, valid, rounds, fn, rdt)
    parts = [_prefixed(head, pv[:nfull], pm[:nfull], fn, rdt, exclusive, ident, xp, dev).reshape(-1)]
    if tail.size:
        parts.append(_prefixed(tail, pv[nfull:nfull + 1], pm[nfull:nfull + 1], fn, rdt, exclusive,
                               ident, xp, dev).reshape(-1))
    dst.local[...] = dev.asarray(pat.local_to_storage(xp.concatenate(parts)))


def scan(a: DistArray, op="sum", exclusive: bool = False, out: DistArray | None = None,
         axis: int | None = None) -> DistArray:
    """Inclusive or exclusive prefix reduction of ``a``. Collective.

    Parameters
    ----------
    a : DistArray
        Any distribution, CPU or GPU (``"sum"`` / ``"prod"`` scan on the device; other ops stage
        each unit's block through the host; the result is on ``a``'s device).
    op : {"sum", "prod", "min", "max"} or binary numpy.ufunc
        Assumed associative. "sum" and "prod" promote small integers as ``numpy.cumsum`` does.
    exclusive : bool
        Element ``i`` combines the elements before ``i`` only; the first is the op's identity
        (0 for "sum", 1 for "prod", the dtype's largest / smallest value for "min" / "max").
    out : DistArray, optional
        Where the result goes (any pattern and device, same shape and team; values cast to its
        dtype; may be ``a``). By default a new array with ``a``'s pattern and device.
    axis : int, optional
        The axis to scan along: required for N-D arrays; for 1-D arrays the global order.

    Returns
    -------
    DistArray
        ``out``.

    Raises
    ------
    ValueError
        On every rank, before communicating: an unknown ``op``, a missing or bad ``axis``, an
        exclusive scan with an op that has no identity, or an ``out`` of another shape or team.
    """
    fn, axis, rdt, ident = _check_scan(a, op, exclusive, out, axis)
    if out is None:
        out = empty(a.shape, rdt, dist=a.dist, team=a.team, grid=a.grid, device=a.device)
    if a.size == 0:
        return out
    layout = _work_layout(a, axis)
    temps: list = []
    try:
        src = a
        if layout is not None:
            src = empty(a.shape, rdt, dist=layout[0], team=a.team, grid=layout[1], device=a.device)
            temps.append(src)
            copy(a, src)
        here = out.pattern == src.pattern and out.device.is_gpu == a.device.is_gpu
        dst = out if here else (src if temps else None)
        if dst is None:
            dst = empty(a.shape, rdt, dist=a.dist, team=a.team, grid=a.grid, device=a.device)
            temps.append(dst)
        if a.ndim == 1:
            _scan_1d(src, dst, fn, rdt, bool(exclusive), ident)
        else:
            _scan_block_nd(src, dst, fn, axis, rdt, bool(exclusive), ident)
        if dst is not out:
            copy(dst, out)
    finally:
        for t in temps:
            t.free()
    out.device.synchronize()                      # device work done before the barrier
    a.team.barrier()                              # out is complete everywhere before any reads
    return out


def cumsum(a: DistArray, exclusive: bool = False, out: DistArray | None = None,
           axis: int | None = None) -> DistArray:
    """Cumulative sum: :func:`scan` with ``op="sum"``. Collective."""
    return scan(a, "sum", exclusive=exclusive, out=out, axis=axis)

"""Planning one-sided access: from a global index expression to a few transfers per owner.

:func:`normalize` turns ``a[idx]`` (integers, slices with any step, ``...``) into one arithmetic
selection per dimension. :func:`plan` splits each dimension's selection by owning grid coordinate,
in closed form for unit steps (O(owners touched), independent of the number of elements) and with
vectorised NumPy otherwise, and combines the dimensions into one :class:`Piece` per owning unit.
A piece knows where its elements sit in the result (slices or index arrays) and in the owner's
storage (runs per dimension), from which :func:`target_datatype` builds one MPI derived datatype:
one ``MPI_Get``/``MPI_Put`` per owner, however strided the selection.
"""
from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

__all__ = ["Selection", "normalize", "index_key", "Piece", "plan", "target_datatype", "storage_offsets"]


@dataclass(frozen=True)
class Selection:
    """Global indices ``start + step * k`` for ``k < count`` along one dimension."""

    start: int
    step: int
    count: int
    keep: bool          # False for an integer index (the dimension is dropped from the result)

    def indices(self) -> np.ndarray:
        return self.start + self.step * np.arange(self.count, dtype=np.int64)


def index_key(idx):
    """A hashable key for an index expression of ints, slices and ``...`` (else ``None``: not
    cached), under which a planned access is kept. Local."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    key = []
    for i in idx:
        if i is Ellipsis:
            key.append(Ellipsis)
        elif isinstance(i, slice):
            key.append((i.start, i.stop, i.step))
        elif isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            key.append(int(i))
        else:
            return None
    return tuple(key)


def normalize(idx, shape) -> tuple[tuple[Selection, ...], tuple[int, ...]]:
    """Per-dimension selections for ``idx`` on an array of ``shape``, and the result's shape.

    Raises ``IndexError`` naming the index and the global shape for out-of-range integers, and
    for index kinds that one-sided access does not take (boolean masks, index arrays).
    """
    if not isinstance(idx, tuple):
        idx = (idx,)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[k + 1:]
    if len(idx) > len(shape):
        raise IndexError(f"too many indices ({len(idx)}) for global shape {shape}")
    idx = idx + (slice(None),) * (len(shape) - len(idx))
    sels, out = [], []
    for d, (i, n) in enumerate(zip(idx, shape)):
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            count = len(range(start, stop, step))
            sels.append(Selection(start, step, count, True))
            out.append(count)
            continue
        try:
            j = operator.index(i)
        except TypeError:
            raise IndexError(f"global index {i!r} (dimension {d}) is not an integer or a slice; "
                             f"one-sided access takes integers, slices and '...'") from None
        if not -n <= j < n:
            raise IndexError(f"index {j} is out of bounds for dimension {d} of global shape {shape}")
        sels.append(Selection(j % n, 1, 1, False))
    return tuple(sels), tuple(out)


@dataclass
class DimPart:
    """The elements of one dimension's selection owned by grid coordinate ``coord``."""

    coord: int
    pos: slice | np.ndarray      # positions in the selection (the result's axis)
    local: np.ndarray | tuple    # local indices on the owner: an array, or (start, count, step)

    @property
    def count(self) -> int:
        return self.local[1] if isinstance(self.local, tuple) else len(self.local)

    def local_array(self) -> np.ndarray:
        if isinstance(self.local, tuple):
            s, c, st = self.local
            return s + st * np.arange(c, dtype=np.int64)
        return self.local


def _split_dim(m, sel: Selection) -> list[DimPart]:
    """Split one dimension's selection by owner coordinate."""
    if sel.count == 0:
        return []
    if m.p == 1:
        loc = (sel.start, sel.count, sel.step) if sel.step > 0 else sel.indices()
        return [DimPart(0, slice(0, sel.count), loc)]
    if sel.step == 1 and not m.cyclic:
        # contiguous range over balanced blocks: one part per owner, all closed-form
        parts, g, stop = [], sel.start, sel.start + sel.count
        while g < stop:
            c = int(m.owner(g))
            end = min(stop, m.start(c) + m.size(c))
            parts.append(DimPart(c, slice(g - sel.start, end - sel.start), (int(m.local(g)), end - g, 1)))
            g = end
        return parts
    if sel.step == 1 and sel.count <= m.b:
        # within at most two blocks of a block-cyclic dimension
        parts, g, stop = [], sel.start, sel.start + sel.count
        while g < stop:
            end = min(stop, (g // m.b + 1) * m.b)
            parts.append(DimPart(int(m.owner(g)), slice(g - sel.start, end - sel.start),
                                 (int(m.local(g)), end - g, 1)))
            g = end
        return parts
    g = sel.indices()
    owner = m.owner(g)
    if np.all(owner == owner[0]):
        loc = m.local(g)
        return [DimPart(int(owner[0]), slice(0, sel.count), as_progression(loc))]
    # group positions by owner; a stable sort keeps each owner's positions (and, since local
    # indices grow with global ones, its local indices) in increasing order
    order = np.argsort(owner.astype(np.uint32 if m.p < 2**32 else np.int64), kind="stable")
    sorted_owner = owner[order]
    cuts = np.flatnonzero(np.diff(sorted_owner)) + 1
    parts = []
    for pos in np.split(order, cuts):
        c = int(owner[pos[0]])
        loc = m.local(g[pos])
        parts.append(DimPart(c, _as_slice(pos), as_progression(loc)))
    return parts


def _as_slice(pos: np.ndarray):
    if len(pos) == 1 or (len(pos) > 1 and np.all(np.diff(pos) == pos[1] - pos[0]) and pos[1] > pos[0]):
        step = int(pos[1] - pos[0]) if len(pos) > 1 else 1
        return slice(int(pos[0]), int(pos[-1]) + 1, step)
    return pos


def as_progression(loc: np.ndarray):
    """``loc`` (local indices, increasing) as ``(start, count, step)`` when it is an arithmetic
    progression with positive step, else ``loc`` itself: the form of ``DimPart.local``. Local.

    Internal to pgas (the planners here and in ``redistribute`` build their :class:`DimPart` s
    with it); not part of the user-facing API.
    """
    if len(loc) == 1:
        return (int(loc[0]), 1, 1)
    d = np.diff(loc)
    if d[0] > 0 and np.all(d == d[0]):
        return (int(loc[0]), len(loc), int(d[0]))
    return loc


@dataclass
class Piece:
    """The part of a selection that one unit owns."""

    unit: int
    parts: tuple[DimPart, ...]          # one per dimension of the array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(p.count for p in self.parts)

    def result_index(self, keep) -> tuple:
        """Index into the (full-dimensional) result for this piece's elements."""
        pos = [p.pos for p in self.parts]
        if all(isinstance(q, slice) for q in pos):
            return tuple(pos)
        arrays = [np.arange(q.start, q.stop, q.step) if isinstance(q, slice) else q for q in pos]
        return np.ix_(*arrays)

    def local_index(self) -> tuple:
        """Index into the owner's local-index space (slices where possible)."""
        out = []
        for p in self.parts:
            if isinstance(p.local, tuple):
                s, c, st = p.local
                out.append(slice(s, s + c * st, st))
            else:
                out.append(p.local)
        if all(isinstance(q, slice) for q in out):
            return tuple(out)
        arrays = [np.arange(q.start, q.stop, q.step) if isinstance(q, slice) else q for q in out]
        return np.ix_(*arrays)


def plan(pattern, sels: tuple[Selection, ...]) -> list[Piece]:
    """One :class:`Piece` per unit owning part of the selection. Local; cost grows with the
    number of owners touched and (for non-unit steps on cyclic dimensions) the selection's
    extents, never with the total number of units."""
    per_dim = [_split_dim(m, s) for m, s in zip(pattern.maps, sels)]
    if any(not p for p in per_dim):
        return []
    pieces = []
    for combo in itertools.product(*per_dim):
        unit = pattern.unit_of([p.coord for p in combo])
        pieces.append(Piece(unit, combo))
    return pieces


# --------------------------------------------------------------------------- storage addressing
def _dim_runs(part: DimPart, tile: int | None):
    """Runs ``(storage_tile, offset_start, count, step)`` of one dimension's local indices.

    Without tiles there is one run per arithmetic progression (tile index 0)."""
    if tile is None:
        if isinstance(part.local, tuple):
            s, c, st = part.local
            return [(0, s, c, st)], st
        loc = part.local
        # merge consecutive local indices into runs (block-cyclic intersections are long runs)
        cuts = np.flatnonzero(np.diff(loc) != 1) + 1
        starts = np.concatenate(([0], cuts))
        lengths = np.diff(np.concatenate((starts, [len(loc)])))
        return [(0, int(loc[a]), int(n), 1) for a, n in zip(starts, lengths)], 1
    loc = part.local_array()
    t, o = loc // tile, loc % tile
    runs, step = [], 1
    if isinstance(part.local, tuple):
        step = part.local[2]
    # split wherever the tile changes or the step breaks
    breaks = np.flatnonzero((np.diff(t) != 0) | (np.diff(o) != step)) + 1
    for seg in np.split(np.arange(len(loc)), breaks):
        runs.append((int(t[seg[0]]), int(o[seg[0]]), len(seg), step))
    return runs, step


def storage_offsets(piece: Piece, pattern, storage_shape) -> np.ndarray:
    """Element offsets (row-major over the piece) into the owner's flat storage. O(piece size);
    for direct (shared-memory) access to TILE storage."""
    nd = pattern.ndim
    strides = np.cumprod((1,) + tuple(storage_shape[::-1]))[:-1][::-1]
    off = np.zeros((1,) * nd, dtype=np.int64)
    for d, p in enumerate(piece.parts):
        loc = p.local_array()
        shape = [1] * nd
        shape[d] = len(loc)
        if pattern.tiled:
            b = pattern.tile_shape[d]
            contrib = (loc // b) * strides[d] + (loc % b) * strides[nd + d]
        else:
            contrib = loc * strides[d]
        off = off + contrib.reshape(shape)
    return off


def target_datatype(piece: Piece, pattern, storage_shape, base: MPI.Datatype, halo=None):
    """``(datatype, displacement)`` addressing ``piece``'s elements in the owner's storage.

    The datatype's elements are in row-major order of the piece, so the origin side is a
    contiguous buffer of ``piece.shape``. Returns a predefined type with a count for the common
    contiguous case (``(base, disp, count)``), else a committed derived type (``(type, disp, 1)``)
    that the caller frees. ``halo`` offsets local indices by the halo width per dimension.
    """
    nd = pattern.ndim
    itemsize = base.Get_size()
    strides = [int(s) for s in np.cumprod((1,) + tuple(storage_shape[::-1]))[:-1][::-1]]
    off = [0] * nd if halo is None else list(halo)
    tiles = pattern.tile_shape if pattern.tiled else [None] * nd
    runs_per_dim = []
    for d, p in enumerate(piece.parts):
        runs, step = _dim_runs(p, tiles[d])
        if tiles[d] is None:
            rs = [((o + off[d]) * strides[d], c, st * strides[d]) for (_, o, c, st) in runs]
        else:
            rs = [(t * strides[d] + o * strides[nd + d], c, st * strides[nd + d]) for (t, o, c, st) in runs]
        runs_per_dim.append(rs)
    # fast path: one contiguous stretch of storage -> the predefined type with a count
    if all(len(r) == 1 for r in runs_per_dim):
        counts = [r[0][1] for r in runs_per_dim]
        if _outer_contiguous(counts, [r[0][2] for r in runs_per_dim]):
            return base, sum(r[0][0] for r in runs_per_dim), int(np.prod(counts))
    # general case: nested hindexed types, innermost dimension first. At each level the inner
    # type is resized to the dimension's element stride, so a run of k elements is one block of
    # length k; displacements are absolute byte offsets along that dimension.
    dtype, created = base, []
    for d in reversed(range(nd)):
        rs = runs_per_dim[d]
        stride = next((r[2] for r in rs if r[1] > 1), 1)
        inner = dtype.Create_resized(0, stride * itemsize)
        t = inner.Create_hindexed([r[1] for r in rs], [r[0] * itemsize for r in rs])
        created += [inner, t]
        dtype = t
    dtype.Commit()
    for t in created[:-1]:
        t.Free()
    return dtype, 0, 1


def _outer_contiguous(counts, strides) -> bool:
    """True when the piece is one contiguous stretch of storage in row-major order."""
    expect = 1
    for c, st in zip(reversed(counts), reversed(strides)):
        if c == 1:
            continue
        if st != expect:
            return False
        expect = st * c
    return True

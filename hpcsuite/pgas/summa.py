"""SUMMA: the product of two distributed matrices on a 2-D process grid.

``C = A @ B`` with ``A`` (m x k), ``B`` (k x n) and ``C`` (m x n) distributed over the same ``Pr x Pc``
grid, C's rows like A's and C's columns like B's (van de Geijn and Watts' SUMMA, as ScaLAPACK's
``PDGEMM`` and DASH's ``dash::summa``). The inner dimension is cut into panels that each have one
owner of A's column and of B's row distribution (:func:`panels`); for each panel the grid column
that owns A's columns broadcasts its local panel along every grid row, the grid row that owns B's
rows broadcasts along every grid column, and every rank adds the product of the two panels to its
block of C with NumPy (BLAS). Each rank holds its blocks of A, B and C plus one panel of each:
``m/Pr x w`` and ``w x n/Pc`` elements.

Layouts that do not fit (another grid, another row distribution of C than of A, a TILE pattern) are
redistributed into temporaries with :func:`~hpcsuite.pgas.copy` first and freed afterwards.
"""
from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from .array import DistArray
from .dist import BLOCKCYCLIC, BLOCKED, DimMap, DistSpec
from .redistribute import copy

__all__ = ["matmul", "panels", "Panel"]

DEFAULT_PANEL = 256         # measured: 128-256 run BLAS near its best, 32-64 lose up to 2x


def _index(loc: np.ndarray):
    """A slice when the local indices are consecutive (a view of the block), else the index array."""
    if loc[-1] - loc[0] == loc.size - 1:
        return slice(int(loc[0]), int(loc[-1]) + 1)
    return loc


class Panel(NamedTuple):
    """Inner indices owned by one coordinate along A's columns and one along B's rows."""

    a_owner: int
    a_index: "slice | np.ndarray"
    b_owner: int
    b_index: "slice | np.ndarray"
    width: int


def panels(amap: DimMap, bmap: DimMap, width: int):
    """The inner dimension cut into :class:`Panel` tuples ``(a_owner, a_index, b_owner, b_index,
    width)``. Local.

    A panel is at most ``width`` inner indices, all owned by one coordinate of ``amap`` (A's
    columns) and one of ``bmap`` (B's rows); ``a_index`` / ``b_index`` are their local indices on
    those owners, in the same order: a slice where consecutive (a panel inside one block), else an
    index array. Every inner index is in exactly one panel. Indices are grouped by owner pair before
    cutting, so the blocks a block-cyclic distribution deals to one coordinate travel together in
    wide panels rather than one block per panel. Every rank computes the same sequence; O(k) work.
    """
    n = amap.n
    if n == 0:
        return
    k = np.arange(n, dtype=np.int64)
    oa, ob = np.broadcast_to(amap.owner(k), k.shape), np.broadcast_to(bmap.owner(k), k.shape)
    order = np.lexsort((k, ob, oa))         # by owner pair, then inner index
    oa, ob, k = oa[order], ob[order], k[order]
    starts = np.flatnonzero(np.concatenate(([True], (oa[1:] != oa[:-1]) | (ob[1:] != ob[:-1]))))
    for s, e in zip(starts.tolist(), np.append(starts[1:], n).tolist()):
        for p in range(s, e, width):
            ks = k[p:min(e, p + width)]
            yield Panel(int(oa[p]), _index(amap.local(ks)), int(ob[p]), _index(bmap.local(ks)), ks.size)


def _fit(spec: DistSpec, p: int) -> DistSpec:
    """``spec`` made valid for ``p`` grid coordinates and for SUMMA (row-major local blocks)."""
    if spec.kind == "tile":
        return BLOCKCYCLIC(spec.block)
    if spec.kind == "none" and p > 1:
        return BLOCKED
    return spec


# ---------------------------------------------------------------------- validation (local)
def _check(A, B, out, panel) -> np.dtype:
    """Validate the arguments alike on every rank; return the compute dtype."""
    for name, x in (("A", A), ("B", B), ("out", out)):
        if x is None and name == "out":
            continue
        if not isinstance(x, DistArray):
            raise ValueError(f"matmul: {name} must be a DistArray, got {type(x).__name__}")
        x.check_alive()
        if x.ndim != 2:
            raise ValueError(f"matmul: {name} must be 2-D, got shape {x.shape}")
        if x.dtype.kind not in "biufc":
            raise ValueError(f"matmul: {name} has the non-numeric dtype {x.dtype}")
    (m, k), (k2, n) = A.shape, B.shape
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ: A is {m}x{k}, B is {k2}x{n}")
    if out is not None and out.shape != (m, n):
        raise ValueError(f"matmul: out has shape {out.shape}, the product is {m}x{n}")
    if isinstance(panel, bool):
        raise ValueError(f"matmul: panel must be a positive integer, got {panel!r}")
    try:
        if operator.index(panel) <= 0:
            raise TypeError
    except TypeError:
        raise ValueError(f"matmul: panel must be a positive integer, got {panel!r}") from None
    for name, x in (("B", B), ("out", out)):
        if x is not None and A.team.comm.Compare(x.team.comm) not in (MPI.IDENT, MPI.CONGRUENT):
            raise ValueError(f"matmul: A and {name} must live on the same team")
    ct = np.result_type(A.dtype, B.dtype)
    if out is not None and not np.can_cast(ct, out.dtype, "same_kind"):
        raise ValueError(f"matmul: cannot store the {ct} product in out of dtype {out.dtype}")
    return ct


# ---------------------------------------------------------------------- layouts
def _fits(x: DistArray, grid, dim: int, target: DimMap) -> bool:
    """Whether ``x`` can be used in place: on ``grid``, not tiled, and laid out like ``target``
    along ``dim``."""
    return x.grid == grid and not x.pattern.tiled and x.pattern.maps[dim].same_as(target)


def _conformed(x: DistArray, grid, dist, dim: int, target: DimMap, temps: list) -> DistArray:
    """``x`` itself when it fits, else a temporary copy of it with ``dist`` on ``grid``. Collective."""
    if _fits(x, grid, dim, target):
        return x
    t = DistArray(x.shape, x.dtype, dist=dist, team=x.team, grid=grid)
    temps.append(t)
    copy(x, t)
    return t


# ---------------------------------------------------------------------- the product
def _summa(Aw: DistArray, Bw: DistArray, ct: np.dtype, width: int) -> np.ndarray:
    """This rank's block of ``Aw @ Bw`` (layouts already conforming). Collective."""
    team = Aw.team
    r, c = Aw.pattern.unit_coords(team.rank)
    amap, bmap = Aw.pattern.maps[1], Bw.pattern.maps[0]
    Al, Bl = Aw.local_on_host(), Bw.local_on_host()
    acc = np.zeros((Al.shape[0], Bl.shape[1]), dtype=ct)
    # along a grid row the grid-column coordinate is the rank (key), and vice versa; Teams, so
    # the panel broadcasts wait politely and hpcsuite.tune sees them. Split once per team and
    # grid shape, kept with the team (collective the first time, on every rank alike).
    row = team.derived(("pgas.summa.row", Aw.grid), lambda t: t.split(r, c))
    col = team.derived(("pgas.summa.col", Aw.grid), lambda t: t.split(c, r))
    for ca, ia, rb, ib, w in panels(amap, bmap, width):
        ap = _panel(row, ca, c, lambda: Al[:, ia], (Al.shape[0], w), Aw)
        bp = _panel(col, rb, r, lambda: Bl[ib, :], (w, Bl.shape[1]), Bw)
        if acc.size:
            acc += ap @ bp
    return acc


def _panel(team, root: int, me: int, mine, shape, x: DistArray) -> np.ndarray:
    """The panel held by ``root`` of ``team``, broadcast to every member. Collective on ``team``."""
    if team.size == 1:
        return mine()                           # nothing to send; a view unless an index array
    buf = np.ascontiguousarray(mine()) if me == root else np.empty(shape, dtype=x.dtype)
    team.Bcast(buf, root=root)
    return buf


def _store(C: DistArray, block: np.ndarray) -> None:
    """Write this rank's block into ``C`` (host storage, and device storage on GPU). Local."""
    C.host_local[...] = block
    if C.device_storage is not None:
        C.local[...] = C.device.xp.asarray(C.host_local)


def matmul(A: DistArray, B: DistArray, out: DistArray | None = None, *,
           panel: int = DEFAULT_PANEL) -> DistArray:
    """``A @ B`` for 2-D distributed arrays with SUMMA. Collective over the arrays' team.

    Parameters
    ----------
    A : DistArray
        ``m x k``, any distribution (BLOCKED, BLOCKCYCLIC(b), CYCLIC, NONE, TILE) and process grid.
    B : DistArray
        ``k x n``, any distribution and grid, on the same team.
    out : DistArray, optional
        ``m x n`` array for the result (its halo is not updated). When omitted a new array is
        allocated with A's row distribution and B's column distribution on A's grid (NONE along a
        distributed grid dimension becomes BLOCKED, TILE(b) becomes BLOCKCYCLIC(b)).
    panel : int, keyword
        Largest panel width along the inner dimension (narrower where an owner's share ends).

    Returns
    -------
    DistArray
        ``out``, or the new array.

    Raises
    ------
    ValueError
        On every rank, before any communication: arrays that are not 2-D DistArrays of numbers,
        inner dimensions that differ, an ``out`` of the wrong shape or of a dtype the product cannot
        be cast to (``same_kind``), a non-positive ``panel``, or arrays on different teams.

    Notes
    -----
    The computation runs on the process grid of ``out`` (when given) or of ``A``. Inputs whose
    layout does not fit it are copied into temporaries (one ``MPI_Alltoallw`` each, see
    :func:`~hpcsuite.pgas.copy`), as is the result when ``out`` does not fit; the temporaries are
    freed before returning. Communication per rank: about ``m k / Pr + k n / Pc`` elements received
    in ``k / w`` pairs of broadcasts (at most one more per pair of owners, see :func:`panels`). The
    product's dtype is ``numpy.result_type(A.dtype, B.dtype)``. GPU arrays are multiplied on the
    host.

    Examples
    --------
    >>> A = pgas.from_numpy(a, dist=(pgas.BLOCKCYCLIC(4), pgas.BLOCKCYCLIC(4)), grid=(0, 0))
    >>> B = pgas.from_numpy(b, dist=(pgas.BLOCKED, pgas.BLOCKED), grid=(0, 0))
    >>> C = pgas.matmul(A, B)   # C: A's rows (BLOCKCYCLIC(4)), B's columns (BLOCKED), A's grid
    >>> np.allclose(C.to_numpy(), a @ b)
    True
    """
    ct = _check(A, B, out, panel)
    m, k = A.shape
    n = B.shape[1]
    grid = (out if out is not None else A).grid
    rspec = _fit(out.dist[0] if out is not None else A.dist[0], grid[0])
    cspec = _fit(out.dist[1] if out is not None else B.dist[1], grid[1])
    rmap, cmap = DimMap(rspec, m, grid[0]), DimMap(cspec, n, grid[1])
    temps: list[DistArray] = []
    try:
        Aw = _conformed(A, grid, (rspec, _fit(A.dist[1], grid[1])), 0, rmap, temps)
        Bw = _conformed(B, grid, (_fit(B.dist[0], grid[0]), cspec), 1, cmap, temps)
        if out is not None and _fits(out, grid, 0, rmap) and out.pattern.maps[1].same_as(cmap):
            C = out
        else:
            C = DistArray((m, n), out.dtype if out is not None else ct, dist=(rspec, cspec),
                          team=A.team, grid=grid, device=A.device)     # GPU operands: GPU result
            if out is not None:
                temps.append(C)
        _store(C, _summa(Aw, Bw, ct, int(panel)))
        result = C if out is None else out
        if C is not result:
            copy(C, result)
        result.sync()             # every block complete before any rank reads one remotely
    finally:
        for t in temps:
            t.free()
    return result

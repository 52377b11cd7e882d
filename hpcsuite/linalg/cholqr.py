"""CholeskyQR2: the QR factorization of a distributed tall-skinny matrix.

``A = Q R`` for an ``m x n`` :class:`~hpcsuite.pgas.DistArray` with ``m >= n`` (in practice
``m >> n``) of full column rank. One CholeskyQR pass is ``G = X^T X``, ``G = R^T R`` (Cholesky),
``Q = X R^-1``; its loss of orthogonality grows like ``cond(X)^2 u``, so a second pass on ``Q``
brings it down to ``u`` for ``cond(A)`` up to about ``u^-1/2`` (1e8); ``R = R2 R1``
(Yamamoto, Nakatsukasa, Yanagisawa and Fukaya, 2015).

Layout (the working layout; ``A`` in any other layout is copied into it with
:func:`~hpcsuite.pgas.copy`, and ``Q`` back into ``A``'s): ``(BLOCKED, BLOCKCYCLIC(panel))`` on a
``Pr x Pc`` grid. The rows are split into ``Pr`` blocks; the columns are cut into panels of
``panel`` columns dealt round-robin to the ``Pc`` grid columns, so rank ``(r, c)`` holds row block
``r`` of the panels ``c, c + Pc, ...``. Round-robin panels balance the triangular Gram and solve work
over the grid columns. A pass on rank ``(r, c)``:

1. ``Pc > 1``: gather row block ``r`` of all of ``X`` along the grid row (``Allgatherv``), since
   its Gram rows need every column to their left;
2. Gram rows of its own panels ``p``: ``G[p, :p] = X_r[:, p]^T X_r[:, :p]`` (``gemm``) and the
   diagonal block ``G[p, p]`` (``syrk``), the lower triangle only;
3. sum those rows over the grid column (``Allreduce`` over the ranks sharing the columns, i.e. over
   the row blocks), then gather all rows along the grid row (``Allgatherv``): every rank holds the
   same ``G``;
4. ``G = L L^T`` (``potrf``), replicated: ``n`` is small and every rank has the same ``G``, so every
   rank gets the same ``R = L^T`` (or the same failure) without a broadcast;
5. ``Q = X R^-1`` on its own panels: with ``Pc == 1`` one local ``trsm`` in place; with ``Pc > 1``
   each panel needs the columns to its left, so ``L^-1`` is formed (``trsm`` on the identity) and
   ``Q[:, p] = X_r[:, :p] L^-1[p, :p]^T + X[:, p] L^-1[p, p]^T`` (``gemm`` and ``trmm``).

Which grid pays: ``Pc = 1`` (the rows over all ranks) moves only ``n x n`` Gram data and suits
``m >> n``; ``Pc > 1`` moves ``X``'s row blocks along the grid rows and pays only when the Gram and
solve work per rank (``m n^2 / (Pr Pc)``) outweighs that, i.e. for wider matrices. That trade-off
and the panel width (kernel size against load balance) are what an autotuner explores.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..pgas import BLOCKCYCLIC, BLOCKED, DistArray, Pattern, copy
from ..runtime import grid_shape
from .cholesky import GridTeams
from .kernels import NotPositiveDefiniteError, gemm, potrf, syrk, trmm, trsm

__all__ = ["cholqr2"]


# ---------------------------------------------------------------------- validation (local)
def _layout(A, panel, grid) -> tuple[int, int, int]:
    """Validate alike on every rank; return the working layout ``(Pr, Pc, panel)``."""
    if not isinstance(A, DistArray):
        raise ValueError(f"cholqr2: A must be a pgas.DistArray, got {type(A).__name__}")
    A.check_alive()
    if A.ndim != 2:
        raise ValueError(f"cholqr2: A must be 2-D, got shape {A.shape}")
    m, n = A.shape
    if not 1 <= n <= m:
        raise ValueError(f"cholqr2: A must be tall (m >= n >= 1), got {m} x {n}")
    if A.dtype != np.float64:
        raise ValueError(f"cholqr2: A must be float64, got {A.dtype}")
    if A.device.is_gpu:
        raise ValueError("cholqr2: A must live on the CPU (device='cpu')")
    P = A.team.size
    d0, d1 = A.dist
    fits = d0.kind == "blocked" and (d1.kind == "blockcyclic" or A.grid[1] == 1) and not A.pattern.tiled
    if grid is None:
        dims = tuple(A.grid) if fits else (P, 1)
    else:
        if isinstance(grid, (str, bytes)) or not hasattr(grid, "__len__") or len(grid) != 2:
            raise ValueError(f"cholqr2: grid must be two extents (Pr, Pc), got {grid!r}")
        if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in grid):
            raise ValueError(f"cholqr2: grid extents must be integers (0 = choose), got {grid!r}")
        try:
            dims = grid_shape(P, [int(x) for x in grid])
        except ValueError as e:
            raise ValueError(f"cholqr2: {e}") from None
    Pr, Pc = dims
    if panel is None:
        same_cols = fits and tuple(A.grid) == tuple(dims) and d1.kind == "blockcyclic"
        panel = d1.block if same_cols else -(-n // Pc)
    if isinstance(panel, bool) or not isinstance(panel, (int, np.integer)) or panel < 1:
        raise ValueError(f"cholqr2: panel must be a positive integer, got {panel!r}")
    panel = min(int(panel), n)
    if -(-n // panel) < Pc:
        raise ValueError(f"cholqr2: {n} columns in panels of {panel} leave some of the {Pc} grid "
                         f"columns without a panel; use a narrower panel or fewer grid columns")
    return Pr, Pc, panel


# ---------------------------------------------------------------------- one pass
_RECEIVE: dict = {}
_RECEIVE_KEEP = 4                      # sizes kept (a pass gathers a few different shapes)


def _receive_buffer(size: int) -> np.ndarray:
    """The gather's receive buffer, kept from the last call of the same size. Local.

    A fresh ``np.empty`` of this size (tens of MB: mmap) costs a page fault per 4 KiB page in every
    gather, inside the Allgatherv. Reused, the pages stay mapped: faster runs, and a tuner run that
    skips the Allgatherv unpacks from the same mapped pages as a real run (from a fresh buffer it
    read the kernel's zero page, 2-4 % faster than a real run: CholeskyQR2 predictions came out low).
    The buffers of the last few sizes are kept. A buffer never leaves ``_gather``.
    """
    buf = _RECEIVE.pop(size, None)
    if buf is None:
        buf = np.empty(size)
    _RECEIVE[size] = buf                 # most recent last; drop the oldest beyond the limit
    while len(_RECEIVE) > _RECEIVE_KEEP:
        del _RECEIVE[next(iter(_RECEIVE))]
    return buf


class _Pass:
    """The geometry of the working layout on one rank, and one CholeskyQR pass in place."""

    def __init__(self, X: DistArray, g: GridTeams, panel: int):
        self.x = X.local
        self.n, self.w = X.shape[1], panel
        self.Pr, self.Pc = X.grid
        self.g, self.r, self.c = g, g.r, g.c
        self.npanels = -(-self.n // panel)

    def panels(self, c: int):
        """``(local column offset, global start, global stop)`` of grid column ``c``'s panels."""
        for i, p in enumerate(range(c, self.npanels, self.Pc)):
            j0 = p * self.w
            yield i * self.w, j0, min(self.n, j0 + self.w)

    def ncols(self, c: int) -> int:
        return sum(j1 - j0 for _, j0, j1 in self.panels(c))

    def _gather(self, mine: np.ndarray, nrows: int, by_rows: bool) -> np.ndarray:
        """Assemble, from every grid column's local panels, the full matrix in global order:
        ``mine`` is this rank's ``rows x ncols`` block (``by_rows``: ``ncols x n``, panels along
        rows). Collective over the grid row (Allgatherv)."""
        counts = [nrows * self.ncols(c) for c in range(self.Pc)]
        displs = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        flat = _receive_buffer(sum(counts))
        self.g.row.Allgatherv(np.ascontiguousarray(mine), [flat, counts, displs, MPI.DOUBLE])
        full = np.empty((self.n, nrows) if by_rows else (nrows, self.n))
        for c in range(self.Pc):
            blk = flat[displs[c]:displs[c] + counts[c]]
            blk = blk.reshape(self.ncols(c), nrows) if by_rows else blk.reshape(nrows, self.ncols(c))
            for lo, j0, j1 in self.panels(c):
                if by_rows:
                    full[j0:j1] = blk[lo:lo + j1 - j0]
                else:
                    full[:, j0:j1] = blk[:, lo:lo + j1 - j0]
        return full

    def gram(self, Xr: np.ndarray) -> np.ndarray:
        """The lower triangle of ``G = X^T X`` (``n x n``), the same on every rank. Collective."""
        Gc = np.zeros((self.ncols(self.c), self.n))
        for lo, j0, j1 in self.panels(self.c):
            rows = Gc[lo:lo + j1 - j0]
            syrk(Xr[:, j0:j1], rows[:, j0:j1], trans=True, lower=True)
            if j0:
                gemm(Xr[:, j0:j1], Xr[:, :j0], rows[:, :j0], trans_a=True)
        if self.Pr > 1:
            self.g.col.Allreduce(MPI.IN_PLACE, Gc)
        return Gc if self.Pc == 1 else self._gather(Gc, self.n, by_rows=True)

    def run(self) -> np.ndarray:
        """Replace ``X`` by ``Q = X R^-1``; return ``L = R^T`` (lower, ``n x n``). Collective."""
        Xr = self.x if self.Pc == 1 else self._gather(self.x, self.x.shape[0], by_rows=False)
        G = self.gram(Xr)
        try:
            potrf(G, lower=True)
        except NotPositiveDefiniteError as e:
            raise NotPositiveDefiniteError(
                f"cholqr2: the Gram matrix A^T A is not positive definite at column {e.column}: A is "
                f"rank-deficient or too ill-conditioned for CholeskyQR2 (cond(A) above about 1e8)",
                column=e.column) from None
        L = np.tril(G)
        if self.Pc == 1:
            trsm(L, self.x, right=True, lower=True, trans=True)
            return L
        Linv = np.eye(self.n)
        trsm(L, Linv, lower=True)                      # L^-1; R^-1 = L^-T
        for lo, j0, j1 in self.panels(self.c):
            Qp = self.x[:, lo:lo + j1 - j0]            # holds X[:, p]; Xr keeps the original
            trmm(Linv[j0:j1, j0:j1], Qp, right=True, lower=True, trans=True)
            if j0:
                gemm(Xr[:, :j0], Linv[j0:j1, :j0], Qp, beta=1.0, trans_b=True)
        return L


def cholqr2(A: DistArray, *, panel: int | None = None, grid=None) -> tuple[DistArray, np.ndarray]:
    """CholeskyQR2 of a tall-skinny distributed matrix: ``A = Q R``. Collective over A's team.

    Parameters
    ----------
    A : DistArray
        ``m x n`` float64 with ``m >= n`` and full column rank, any distribution; it is not
        modified.
    panel : int, optional, keyword
        Width of the column panels dealt round-robin to the grid columns (see the module notes).
        Default: A's column block when ``A`` is already in the working layout on that grid, else
        ``ceil(n / Pc)`` (one panel per grid column).
    grid : (Pr, Pc), optional, keyword
        The process grid (0 = choose, as ``MPI_Dims_create``). Default: A's grid when A's rows are
        BLOCKED and its columns BLOCKCYCLIC (or not split), else all ranks along the rows.

    Returns
    -------
    Q : DistArray
        ``m x n`` with orthonormal columns, distributed like ``A`` (same shape, distribution, grid
        and team; a new array).
    R : numpy.ndarray
        ``n x n`` upper triangular with a positive diagonal, the same on every rank.

    Raises
    ------
    ValueError
        On every rank, before any communication: ``A`` not a 2-D float64 ``DistArray`` on the CPU,
        ``m < n``, a grid that cannot hold the team, a non-positive panel, or more grid columns
        than panels.
    NotPositiveDefiniteError
        (a ``numpy.linalg.LinAlgError``) on every rank when ``A^T A`` is not numerically positive
        definite (rank-deficient ``A``, or ``cond(A)`` above about 1e8).

    Examples
    --------
    >>> A = pgas.from_numpy(a, dist=(pgas.BLOCKED, pgas.NONE))       # 4000 x 16, rows split
    >>> Q, R = linalg.cholqr2(A)
    >>> np.allclose(Q.to_numpy() @ R, a)
    True
    """
    Pr, Pc, w = _layout(A, panel, grid)
    work = Pattern(A.shape, (BLOCKED, BLOCKCYCLIC(w)), team=A.team, grid=(Pr, Pc))
    Q = DistArray(A.shape, np.float64, dist=A.dist, team=A.team, grid=A.grid)
    in_place = work == A.pattern
    X = Q if in_place else DistArray(A.shape, np.float64, dist=work.dist, team=A.team, grid=(Pr, Pc))
    try:
        if in_place:
            X.local[...] = A.local
        else:
            copy(A, X)
        step = _Pass(X, GridTeams.of(A.team, (Pr, Pc)), w)
        L1 = step.run()
        L2 = step.run()
        R = L1.T.copy()
        trmm(L2, R, lower=True, trans=True)            # R = R2 R1 = L2^T L1^T
        if not in_place:
            copy(X, Q)
        Q.sync()
    except BaseException:
        Q.free()
        raise
    finally:
        if not in_place:
            X.free()
    return Q, R

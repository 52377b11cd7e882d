"""Distributed Cholesky factorization of a 2-D block-cyclic matrix (ScaLAPACK ``PDPOTRF`` structure).

``A = L L^T`` for a symmetric positive-definite ``n x n`` :class:`~hpcsuite.pgas.DistArray`
distributed ``(BLOCKCYCLIC(b), BLOCKCYCLIC(b))`` on a ``Pr x Pc`` process grid; block ``(i, j)`` lives
on grid coordinates ``(i % Pr, j % Pc)``. Right-looking, one block column ``k`` per step:

1. the owner of the diagonal block factors it, ``L_kk = chol(A_kk)`` (``potrf``), and broadcasts it
   down its grid column;
2. the owners of the panel blocks below solve ``L_ik = A_ik L_kk^-T`` (one ``trsm`` per rank over all
   of its panel rows);
3. each of those ranks broadcasts its part of the panel along its grid row, so every rank holds the
   panel blocks of its own block rows; the panel blocks of its own block *columns* (the transposed
   role) then travel down each grid column from the grid row that received them;
4. every rank updates its blocks of the trailing lower triangle, ``A_ij -= L_ik L_jk^T``, one local
   block column ``j`` at a time: ``syrk`` on the diagonal block ``(j, j)`` where it owns it, one
   ``gemm`` for all of its blocks below it.

Tuning parameters: the block size ``b`` (from ``A``'s distribution), the grid shape (``A``'s grid),
the panel broadcast ``variant`` (``"bcast"``: ``MPI_Bcast`` on the row / column sub-communicators;
``"ring"``: a pipelined ring of point-to-point messages, the panel cut into segments that each rank
forwards while the next arrives) and ``lookahead`` (1: update and factor the next block column first
and start its row broadcast before the rest of the trailing update, so the ranks outside the panel
column are not idle while it is factored; the bcast variant overlaps with a non-blocking
``MPI_Ibcast``, the ring variant advances one ring step between block columns of the update).

Failure is collective: the status of every diagonal factorization travels with the broadcasts
(one extra element), so when a block is not positive definite every rank raises
:class:`~hpcsuite.linalg.kernels.NotPositiveDefiniteError` after the same broadcast, and no rank
is left waiting.

All communication goes through :class:`~hpcsuite.runtime.Team` methods (``Bcast``, ``Ibcast`` /
``Wait``, ``Sendrecv``) and all computation through :mod:`hpcsuite.linalg.kernels`, so
``hpcsuite.tune`` sees every kernel.
"""
from __future__ import annotations

import functools

import numpy as np
from mpi4py import MPI

from ..pgas import DistArray
from ..runtime import Team, compute
from .kernels import NotPositiveDefiniteError, gemm, potrf, syrk, trsm

__all__ = ["cholesky", "VARIANTS", "GridTeams"]

VARIANTS = ("bcast", "ring")
RING_SEGMENT = 8192           # elements per ring segment (64 KiB): big enough that latency does not
RING_MAX_SEGMENTS = 8         # dominate, small enough that the pipeline fills on a few ranks
_EMPTY = np.empty(0)


# ---------------------------------------------------------------------- grid and sub-teams
class GridTeams:
    """A 2-D process grid over ``team`` with its row and column sub-teams. Collective to create
    and to :meth:`GridTeams.free` (or use as a context manager).

    Ranks sit row-major on the grid, as :class:`~hpcsuite.pgas.Pattern` numbers units, so grid
    coordinates ``(r, c)`` are the array's. ``row`` holds the ranks of grid row ``r`` (rank in it:
    ``c``), ``col`` those of grid column ``c`` (rank in it: ``r``). :meth:`of` gives the one kept
    with the team, which the factorisations use.
    """

    def __init__(self, team: Team, dims):
        self.grid = team.grid([int(d) for d in dims])
        self.row = self.grid.sub([False, True])
        self.col = self.grid.sub([True, False])
        self.r, self.c = self.grid.coords

    @classmethod
    def of(cls, team: Team, dims) -> "GridTeams":
        """The grid of ``dims`` over ``team`` with its row and column teams, made once per team and
        grid shape and kept with the team (:meth:`Team.derived
        <hpcsuite.runtime.Team.derived>`): freed with the team or at exit, never by the caller.
        Collective the first time for a team and shape, local afterwards."""
        dims = tuple(int(d) for d in dims)
        return team.derived(("linalg.grid_teams", dims), lambda t: cls(t, dims))

    def free(self) -> None:
        """Free the row, column and grid communicators. Collective."""
        for t in (self.row, self.col, self.grid):
            t.free()

    def __enter__(self) -> "GridTeams":
        return self

    def __exit__(self, *exc) -> None:
        self.free()


# ---------------------------------------------------------------------- broadcasts
class _Done:
    """A finished broadcast."""

    def poke(self) -> None:
        pass

    def wait(self) -> None:
        pass


_DONE = _Done()


class _IBcast:
    """An ``MPI_Ibcast`` in flight (completes in :meth:`wait`)."""

    def __init__(self, team: Team, buf: np.ndarray, root: int):
        self.team, self.req = team, team.Ibcast(buf, root)

    def poke(self) -> None:
        pass

    def wait(self) -> None:
        if self.req is not None:
            self.team.Wait(self.req)
            self.req = None


class _Ring:
    """A pipelined ring broadcast of a contiguous buffer: the root sends segment ``s`` to the next
    rank, which forwards it while receiving ``s + 1``. Time step ``t`` of the pipeline is one
    ``Sendrecv`` per rank (``PROC_NULL`` at the two ends of the chain): position ``q`` after the root
    sends segment ``t - q`` and receives segment ``t - q + 1``. :meth:`poke` runs one exchange,
    :meth:`wait` the rest."""

    def __init__(self, team: Team, buf: np.ndarray, root: int):
        flat = buf.reshape(-1)
        p = team.size
        self.team, self.q = team, (team.rank - root) % p
        nseg = max(1, min(RING_MAX_SEGMENTS, -(-flat.size // RING_SEGMENT)))
        cuts = [flat.size * i // nseg for i in range(nseg + 1)]
        self.segs = [flat[cuts[i]:cuts[i + 1]] for i in range(nseg)]
        self.next = (team.rank + 1) % p if self.q < p - 1 else MPI.PROC_NULL
        self.prev = (team.rank - 1) % p if self.q > 0 else MPI.PROC_NULL
        self.t, self.end = 0, nseg + p - 2

    def poke(self) -> None:
        nseg = len(self.segs)
        while self.t < self.end:
            s_out, s_in = self.t - self.q, self.t - self.q + 1
            self.t += 1
            send = self.next != MPI.PROC_NULL and 0 <= s_out < nseg
            recv = self.prev != MPI.PROC_NULL and 0 <= s_in < nseg
            if send or recv:
                self.team.Sendrecv(self.segs[s_out] if send else _EMPTY,
                                   self.next if send else MPI.PROC_NULL,
                                   self.segs[s_in] if recv else _EMPTY,
                                   self.prev if recv else MPI.PROC_NULL)
                return

    def wait(self) -> None:
        while self.t < self.end:
            self.poke()


def broadcast(team: Team, buf: np.ndarray, root: int, variant: str, nonblocking: bool = False):
    """Broadcast the contiguous ``buf`` from ``root`` over ``team`` with ``variant``. Collective.

    Returns a handle with ``poke()`` (advance a ring by one step) and ``wait()``; it is already
    complete unless ``nonblocking``.
    """
    if team.size == 1:
        return _DONE
    if variant == "ring":
        h = _Ring(team, buf, root)
    elif nonblocking:
        h = _IBcast(team, buf, root)
    else:
        team.Bcast(buf, root)
        return _DONE
    if not nonblocking:
        h.wait()
    return h


# ---------------------------------------------------------------------- validation (local)
def _check(A, variant, lookahead, out) -> int:
    """Validate alike on every rank before any communication; return the block size."""
    if not isinstance(A, DistArray):
        raise ValueError(f"cholesky: A must be a pgas.DistArray, got {type(A).__name__}")
    A.check_alive()
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"cholesky: A must be a square matrix, got shape {A.shape}")
    if A.dtype != np.float64:
        raise ValueError(f"cholesky: A must be float64, got {A.dtype}")
    if A.device.is_gpu:
        raise ValueError("cholesky: A must live on the CPU (device='cpu')")
    d0, d1 = A.dist
    if d0.kind != "blockcyclic" or d1.kind != "blockcyclic":
        raise ValueError(f"cholesky: A must be distributed (BLOCKCYCLIC(b), BLOCKCYCLIC(b)), got "
                         f"{A.dist}; redistribute it with pgas.copy")
    if d0.block != d1.block:
        raise ValueError(f"cholesky: the block sizes of the two dimensions differ ({d0.block} and "
                         f"{d1.block}); use square blocks")
    b, n = d0.block, A.shape[0]
    if b > n:
        raise ValueError(f"cholesky: block size {b} is larger than the matrix ({n} x {n})")
    if variant not in VARIANTS:
        raise ValueError(f"cholesky: variant must be one of {', '.join(map(repr, VARIANTS))}, "
                         f"got {variant!r}")
    if not isinstance(lookahead, (int, np.integer)) or lookahead not in (0, 1):
        raise ValueError(f"cholesky: lookahead must be 0 or 1, got {lookahead!r}")
    if out is not None and out is not A:
        if not isinstance(out, DistArray):
            raise ValueError(f"cholesky: out must be a pgas.DistArray, got {type(out).__name__}")
        out.check_alive()
        if out.shape != A.shape or out.dtype != A.dtype:
            raise ValueError(f"cholesky: out is {out.dtype} {out.shape}, A is {A.dtype} {A.shape}")
        if out.grid != A.grid:
            raise ValueError(f"cholesky: out's process grid {out.grid} does not match A's {A.grid}")
        if out.dist != A.dist or out.device.is_gpu:
            raise ValueError(f"cholesky: out must be distributed like A ({A.dist}, CPU), got {out.dist}")
        if A.team.comm.Compare(out.team.comm) not in (MPI.IDENT, MPI.CONGRUENT):
            raise ValueError("cholesky: A and out must live on the same team")
    return b


# ---------------------------------------------------------------------- the factorization
class _Factorization:
    """The state of one factorization on one rank: geometry, sub-teams, the local matrix."""

    def __init__(self, L: DistArray, g: GridTeams, variant: str, lookahead: int):
        self.a = L.local
        self.mr, self.mc = self.a.shape
        self.n, self.b = L.shape[0], L.dist[0].block
        self.nb = -(-self.n // self.b)
        self.widths = [min(self.b, self.n - k * self.b) for k in range(self.nb)]
        self.Pr, self.Pc = L.grid
        self.g, self.r, self.c = g, g.r, g.c
        self.variant, self.lookahead = variant, lookahead

    # -------------------------------------------------------------- geometry (global block indices)
    def width(self, k: int) -> int:
        return self.widths[k]

    def lrow(self, i: int) -> int:
        """Local row offset of block row ``i`` (owned by grid row ``i % Pr``)."""
        return (i // self.Pr) * self.b

    def lcol(self, j: int) -> int:
        return (j // self.Pc) * self.b

    def rows_from(self, i: int) -> int:
        """Local row offset of this rank's first block row ``>= i`` (``mr`` when none)."""
        i0 = i + (self.r - i) % self.Pr
        return min(self.lrow(i0), self.mr)

    def cols_from(self, j: int) -> int:
        j0 = j + (self.c - j) % self.Pc
        return min(self.lcol(j0), self.mc)

    def my_cols(self, j: int) -> range:
        """This rank's block columns ``>= j``."""
        return range(j + (self.c - j) % self.Pc, self.nb, self.Pc)

    def my_rows(self, i: int) -> range:
        return range(i + (self.r - i) % self.Pr, self.nb, self.Pr)

    # -------------------------------------------------------------- one panel
    def start_panel(self, k: int, nonblocking: bool):
        """Factor block column ``k`` (panel column ranks) and start its row broadcast.
        Returns ``(handle, buffer, local panel)``; collective over the grid."""
        kb, rk, ck = self.width(k), k % self.Pr, k % self.Pc
        P, status = None, 0.0
        if self.c == ck:
            status, Lkk = self._diagonal(k, kb, rk)
            lo = self.rows_from(k + 1)
            P = self.a[lo:, self.lcol(k):self.lcol(k) + kb]
            if status == 0.0 and P.shape[0]:
                trsm(Lkk, P, right=True, lower=True, trans=True)
        if self.Pc == 1:
            return _DONE, np.array([status]), P
        rows = self.mr - self.rows_from(k + 1)
        buf = np.empty(rows * kb + 1)
        if self.c == ck:
            buf[:-1].reshape(rows, kb)[...] = P
        buf[-1] = status if self.c == ck else 0.0   # a skipped broadcast must read "no failure"
        return broadcast(self.g.row, buf, ck, self.variant, nonblocking), buf, P

    def _diagonal(self, k: int, kb: int, rk: int):
        """potrf on the diagonal block's owner, then down the grid column: ``(status, L_kk)``."""
        status, D = 0.0, None
        if self.r == rk:
            i0, j0 = self.lrow(k), self.lcol(k)
            D = self.a[i0:i0 + kb, j0:j0 + kb]
            try:
                potrf(D, lower=True, block=k, offset=k * self.b)
            except NotPositiveDefiniteError as e:
                status = float(e.column + 1)
        if self.Pr == 1:
            return status, D
        buf = np.empty(kb * kb + 1)
        if self.r == rk:
            buf[:-1].reshape(kb, kb)[...] = D
        buf[-1] = status if self.r == rk else 0.0
        broadcast(self.g.col, buf, rk, self.variant)
        return float(buf[-1]), (D if self.r == rk else buf[:-1].reshape(kb, kb))

    def finish_panel(self, k: int, started):
        """Complete the row broadcast of panel ``k``, raise on every rank if its diagonal block
        was not positive definite, then give every rank the panel blocks of its block columns.
        Returns ``(Lrow, Lcol)``. Collective over the grid."""
        h, buf, P = started
        h.wait()
        status = float(buf[-1])
        if status:
            self._fail(int(status) - 1)
        kb = self.width(k)
        Lrow = P if self.Pc == 1 else buf[:-1].reshape(-1, kb)
        return Lrow, self._transposed(k, kb, Lrow)

    def _fail(self, col: int):
        blk = col // self.b
        first, last = blk * self.b, blk * self.b + self.width(blk) - 1
        raise NotPositiveDefiniteError(
            f"cholesky: the matrix is not positive definite: the leading minor of order {col + 1} "
            f"is not positive (block column {blk}, columns {first}..{last})", column=col, block=blk)

    def _transposed(self, k: int, kb: int, Lrow: np.ndarray) -> dict:
        """The panel blocks ``j > k`` of this rank's block columns: ``{j: L_jk}``.

        Block ``j`` is in the ``Lrow`` of grid row ``j % Pr``: for each such source row, the blocks
        it holds for this grid column go down the column in one broadcast (on a square grid only
        the diagonal rank sends, its whole ``Lrow``). The blocks are views, of ``Lrow`` for this
        grid row's own blocks and of the received buffers for the others: nothing is unpacked,
        and nothing is packed unless it is sent (measured: packing and unpacking were a fifth of
        a run whose kernels the tuner skips)."""
        js = self.my_cols(k + 1)
        if not js:
            return {}
        lo_r, w_, lrow = self.rows_from(k + 1), self.widths, self.lrow
        blocks = {}
        for s in range(self.Pr):
            Js = [j for j in js if j % self.Pr == s]          # the same on every rank of the column
            if not Js:
                continue
            if s == self.r:
                views = [Lrow[lrow(j) - lo_r:lrow(j) - lo_r + w_[j]] for j in Js]
                blocks.update(zip(Js, views))
                if self.Pr == 1:
                    continue                                   # nobody to send to
                if len(Js) == len(self.my_rows(k + 1)):    # all of Lrow, in order
                    buf = np.ascontiguousarray(Lrow)           # (a view of A when Pc == 1)
                else:
                    buf = np.concatenate(views) if len(views) > 1 else np.ascontiguousarray(views[0])
                broadcast(self.g.col, buf, s, self.variant)
            else:
                buf = np.empty((sum(w_[j] for j in Js), kb))
                broadcast(self.g.col, buf, s, self.variant)
                pos = 0
                for j in Js:
                    blocks[j] = buf[pos:pos + w_[j]]
                    pos += w_[j]
        return blocks

    # -------------------------------------------------------------- trailing update
    def update(self, k: int, Lrow, Lcol: dict, cols, poke=None) -> None:
        """``A_ij -= L_ik L_jk^T`` on this rank's lower blocks of the block columns ``cols``."""
        lo_r = self.rows_from(k + 1)
        a, b, mr, Pr, Pc, r, w_ = self.a, self.b, self.mr, self.Pr, self.Pc, self.r, self.widths
        for j in cols:
            w, cj = w_[j], (j // Pc) * b
            if j % Pr == r:
                rj = (j // Pr) * b
                syrk(Lrow[rj - lo_r:rj - lo_r + w], a[rj:rj + w, cj:cj + w], alpha=-1.0, beta=1.0,
                     lower=True)
                lo = rj + w                                    # the next local block row
            else:
                lo = self.rows_from(j + 1)
            if lo < mr:
                gemm(Lrow[lo - lo_r:], Lcol[j], a[lo:, cj:cj + w], alpha=-1.0, beta=1.0, trans_b=True)
            if poke is not None:
                poke()

    # -------------------------------------------------------------- driver
    def run(self) -> None:
        if not self.lookahead:
            for k in range(self.nb):
                Lrow, Lcol = self.finish_panel(k, self.start_panel(k, nonblocking=False))
                self.update(k, Lrow, Lcol, self.my_cols(k + 1))
            return
        cur = self.finish_panel(0, self.start_panel(0, nonblocking=False))
        for k in range(self.nb):
            Lrow, Lcol = cur
            cols = list(self.my_cols(k + 1))
            if k + 1 == self.nb:
                break
            # the next block column first, then factor it and start its broadcast ...
            self.update(k, Lrow, Lcol, [j for j in cols if j == k + 1])
            started = self.start_panel(k + 1, nonblocking=True)
            # ... and finish this step's update while it travels
            self.update(k, Lrow, Lcol, [j for j in cols if j != k + 1], poke=started[0].poke)
            cur = self.finish_panel(k + 1, started)

    def zero_upper(self) -> None:
        """Zero this rank's elements above the diagonal (blocks and inside diagonal blocks)."""
        a = self.a
        for j in self.my_cols(0):
            w, cj = self.widths[j], self.lcol(j)
            a[:self.rows_from(j), cj:cj + w] = 0.0
            if j % self.Pr == self.r:
                rj = self.lrow(j)
                np.copyto(a[rj:rj + w, cj:cj + w], 0.0, where=_strict_upper(w))


@functools.lru_cache(maxsize=8)
def _strict_upper(w: int) -> np.ndarray:
    """The mask of a ``w x w`` block's elements above the diagonal (cached: one per block size)."""
    return np.triu(np.ones((w, w), dtype=bool), 1)


def cholesky(A: DistArray, *, variant: str = "bcast", lookahead: int = 0,
             out: DistArray | None = None) -> DistArray:
    """Cholesky factorization ``A = L L^T`` of a distributed SPD matrix. Collective over A's team.

    Parameters
    ----------
    A : DistArray
        ``n x n`` float64, distributed ``(BLOCKCYCLIC(b), BLOCKCYCLIC(b))`` on a ``Pr x Pc`` grid
        (``pgas.zeros((n, n), dist=(BLOCKCYCLIC(b),) * 2, grid=(Pr, Pc))``). Only its lower triangle
        is referenced. Its block size and grid are the algorithm's block size and process grid.
    variant : {"bcast", "ring"}, keyword
        How panels travel along grid rows and columns: MPI broadcasts on the row / column
        sub-communicators, or pipelined rings of point-to-point messages.
    lookahead : {0, 1}, keyword
        1: factor the next block column and start its broadcast before finishing the trailing
        update.
    out : DistArray, optional
        Where to write ``L`` (distributed like ``A``); ``A`` is then left unchanged. By default
        ``A`` is overwritten.

    Returns
    -------
    DistArray
        ``L`` (``out``, or ``A``): lower triangular, the upper triangle zeroed.

    Raises
    ------
    ValueError
        On every rank, before any communication: ``A`` (or ``out``) not a square float64
        ``DistArray`` on the CPU, not ``(BLOCKCYCLIC(b), BLOCKCYCLIC(b))``, different block sizes
        along the two dimensions, a block size larger than ``n``, ``out`` on another grid, layout
        or team, an unknown ``variant`` or ``lookahead``.
    NotPositiveDefiniteError
        (a ``numpy.linalg.LinAlgError``) on every rank when ``A`` is not positive definite; it names
        the global column and block column where the factorization broke down. The array being
        factored then holds partial results.

    Notes
    -----
    Per step and rank: at most one ``potrf``, one ``trsm`` and, for each of its trailing block
    columns, one ``syrk`` (where it owns the diagonal block) and one ``gemm``. Communication per
    step: the diagonal block down its grid column, the panel along every grid row (about
    ``n b / Pr`` elements per rank), and the transposed panel down every grid column from at most
    ``Pr / gcd(Pr, Pc)`` source rows (one on a square grid). Extra memory per rank: two panels.

    Examples
    --------
    >>> A = pgas.from_numpy(spd, dist=(pgas.BLOCKCYCLIC(64),) * 2, grid=(0, 0))
    >>> L = linalg.cholesky(A, variant="ring", lookahead=1)
    >>> np.allclose(L.to_numpy(), np.linalg.cholesky(spd))
    True
    """
    _check(A, variant, lookahead, out)
    L = A if out is None else out
    if L is not A:
        # not a kernel a tuner may skip: a selective run would then start from the last run's
        # stale factor (2 million inf/NaN of its 8 million values after one run at n = 4096), and
        # kernel times depend on such data (gemm on NaN 25 % faster, trsm on denormals 1.8x
        # slower); a search predicted block 32 at +74-110 % (bench/RESULTS.md, issue 24, 15th session)
        L.local[...] = A.local
    f = _Factorization(L, GridTeams.of(L.team, L.grid), variant, int(lookahead))
    f.run()
    # a kernel too (a pass over the upper blocks): a tuner's selective run may skip it
    compute("zero_upper", (*L.local.shape, f.b), f.zero_upper)
    L.sync()                      # every block complete before any rank reads one remotely
    return L

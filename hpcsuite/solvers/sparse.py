"""Sparse matrices distributed by row blocks, with a precomputed ghost exchange for SpMM.

:class:`DistCSR` holds the rows ``row_start:row_stop`` of an ``n x n`` matrix on each rank of a team
(the same BLOCKED row split as ``pgas.DistArray``: sizes differ by at most one, the first ``n % p``
blocks are one longer; ranks may own no rows when ``n < p``). At construction each rank splits its
rows into a *diagonal block* (the columns it owns) and an *off-diagonal block* whose columns are
compressed onto the sorted list of remote ("ghost") columns it references; who sends which vector
entries to whom is agreed once (one ``Alltoall`` + one ``Alltoallv``) and reused by every product.

A product ``Y = A @ X`` with a block of ``k`` vectors (local rows x k) posts the ghost receives,
sends the owned rows the neighbours need (point-to-point, neighbours only), multiplies the diagonal
block while the messages travel, then adds the off-diagonal block times the ghost rows.

Symmetric half storage (``symmetric_half=True``) keeps only the upper triangle and uses every stored
off-diagonal nonzero twice (``y_i += a_ij x_j`` and ``y_j += a_ij x_i``), as the GPU nuclear-CI
eigensolver does: contributions to remote rows ``j`` travel back to their owners in a reverse
exchange over the same neighbour lists. On the CPU the local part is one fused pass (numba).

Backends: ``"cpu"`` (scipy.sparse, NumPy blocks) and ``"gpu"`` (cupyx.scipy.sparse, CuPy blocks
resident on the device; ghost rows are staged through the host). CuPy is imported only when
``backend="gpu"`` is asked for.

Examples
--------
With ``mpiexec -n 4``::

    >>> import scipy.sparse as sp
    >>> from hpcsuite.solvers import DistCSR
    >>> A = DistCSR.from_scipy(sp.random(100, 100, 0.05, format="csr") if rank == 0 else None)
    >>> X = np.ones((A.local_rows, 3))          # this rank's rows of a block of 3 vectors
    >>> Y = A @ X                                # collective; Y has the same local rows
    >>> D = A.to_distarray(Y)                    # a pgas.DistArray (BLOCKED rows, NONE columns)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..accel import get_backend
from ..runtime import InputError, Team, agree, block_range, gpu_aware_mpi, observed, raise_message
from ..runtime.waiting import waitall

__all__ = ["DistCSR", "block_owners", "rows_to_distarray", "distarray_to_rows"]

#: relative tolerance of the symmetry check: ``|a_ij - a_ji| <= SYM_RTOL * (|a_ij| + |a_ji|)``
SYM_RTOL = 1e-10

_TAG_FORWARD, _TAG_REVERSE = 0x51, 0x52


# ---------------------------------------------------------------------- row split and agreement
def block_owners(cols: np.ndarray, n: int, p: int) -> np.ndarray:
    """Owning rank of each global row/column index under the BLOCKED split of ``n`` over ``p``
    ranks (vectorised :func:`~hpcsuite.runtime.block_owner`). Local."""
    cols = np.asarray(cols, dtype=np.int64)
    q, r = divmod(n, p)
    if q == 0:                      # n < p: rank i owns row i
        return cols.copy()
    big = r * (q + 1)
    return np.where(cols < big, cols // (q + 1), r + (cols - big) // q)


def _private_comm(team: Team) -> MPI.Comm:
    """A duplicate of the team's communicator for the SpMM point-to-point messages (their tags can
    then never match a user's messages). One per team object, created collectively on first use."""
    return team.derived(("solvers.sparse.dup",), lambda t: t.comm.Dup())


# ---------------------------------------------------------------------- validation of local data
def _as_csr(M, what: str):
    """``M`` (SciPy sparse or a 2-D array) as float64 CSR with summed duplicates, or a message."""
    if not (sp.issparse(M) or isinstance(M, np.ndarray)):
        return None, f"{what} must be a SciPy sparse matrix or a NumPy array, got {type(M).__name__}"
    if M.ndim != 2:
        return None, f"{what} must be 2-D, got shape {M.shape}"
    if np.issubdtype(M.dtype, np.complexfloating):
        return None, f"{what} is complex; only real matrices are supported"
    if not (np.issubdtype(M.dtype, np.number) or M.dtype == np.bool_):
        return None, f"{what} has dtype {M.dtype}; a real numeric dtype is needed"
    csr = sp.csr_matrix(M, dtype=np.float64)
    csr.sum_duplicates()
    return csr, None


def _nonfinite_msg(csr, row_offset: int, what: str) -> str | None:
    bad = ~np.isfinite(csr.data)
    if not bad.any():
        return None
    p = int(np.flatnonzero(bad)[0])
    row = int(np.searchsorted(csr.indptr, p, side="right") - 1)
    return (f"{what} has {int(bad.sum())} NaN or inf entries (the first at row {row + row_offset}, "
            f"column {int(csr.indices[p])}: {csr.data[p]})")


def _asymmetry_msg(rows, trans, row_offset: int, what: str) -> str | None:
    """Compare local rows with the matching rows of the transpose (both CSR, same shape)."""
    excess = abs(rows - trans) - SYM_RTOL * (abs(rows) + abs(trans))
    excess = excess.tocoo()
    bad = excess.data > 0
    if not bad.any():
        return None
    i, j = int(excess.row[bad][0]), int(excess.col[bad][0])
    return (f"{what} is not symmetric: A[{i + row_offset}, {j}] = {float(rows[i, j])!r} but "
            f"A[{j}, {i + row_offset}] = {float(trans[i, j])!r} ({int(bad.sum())} entries in rows "
            f"{row_offset}:{row_offset + rows.shape[0]} differ from their transpose by more than "
            f"{SYM_RTOL:g} relative)")


def _global_checks(A, what: str, symmetric: bool):
    """All checks of a whole matrix on one rank: ``(csr, message)``. Local."""
    csr, msg = _as_csr(A, what)
    if msg:
        return None, msg
    if csr.shape[0] != csr.shape[1]:
        return None, f"{what} must be square, got shape {csr.shape}"
    msg = _nonfinite_msg(csr, 0, what)
    if msg is None and symmetric:
        msg = _asymmetry_msg(csr, csr.T.tocsr(), 0, what)
    return csr, msg


# ---------------------------------------------------------------------- exchange plan
@dataclass
class _Plan:
    """Who sends which vector rows to whom; computed once from the sparsity pattern."""

    ghosts: np.ndarray          # global column ids this rank reads from others (sorted)
    recv: list                  # (peer, offset, count) into the ghost buffer, peers ascending
    send_idx: np.ndarray        # local rows to pack, grouped by destination
    send: list                  # (peer, offset, count) into the packed send buffer

    @property
    def peers(self) -> set:
        return {p for p, _, _ in self.recv} | {p for p, _, _ in self.send}


def _runs(counts: np.ndarray) -> list:
    offs = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return [(int(p), int(offs[p]), int(counts[p])) for p in np.flatnonzero(counts)]


def _build_plan(team: Team, n: int, r0: int, ghosts: np.ndarray) -> _Plan:
    """Tell every owner which of its rows this rank needs. Collective (Alltoall + Alltoallv)."""
    p = team.size
    owners = block_owners(ghosts, n, p)
    need = np.bincount(owners, minlength=p).astype(np.int64) if ghosts.size else np.zeros(p, np.int64)
    give = np.empty(p, np.int64)
    observed(team, "Alltoall", need.nbytes, team.comm.Alltoall, [need, MPI.INT64_T], [give, MPI.INT64_T])
    requested = np.empty(int(give.sum()), np.int64)
    team.Alltoallv([np.ascontiguousarray(ghosts, np.int64), need, _displs(need), MPI.INT64_T],
                   [requested, give, _displs(give), MPI.INT64_T])
    return _Plan(ghosts=ghosts, recv=_runs(need), send_idx=requested - r0, send=_runs(give))


def _displs(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


def _post_exchange(team: Team, comm: MPI.Comm, tag: int, rbuf: np.ndarray, recv_runs: list,
                   sbuf: np.ndarray | None, send_runs: list) -> list | None:
    """Start one neighbour exchange: receive ``recv_runs`` into ``rbuf``, send ``send_runs`` of
    ``sbuf`` (host buffers). Local (point-to-point with the neighbours). Returns the started requests
    (``None`` when this rank has no neighbours); complete them with :func:`_complete_exchange`.

    The exchange is one communication kernel for ``hpcsuite.tune`` ("Ghosts", like a PGAS halo
    update): a selective run may skip the messages with neighbours whose exchange both ends know;
    rows that were then not received are zeros, never uninitialised memory."""
    if not recv_runs and not send_runs:
        return None
    peers = [p for p, _, _ in recv_runs] + [p for p, _, _ in send_runs]

    def start(active=None) -> list:
        live = None if active is None else set(active)
        reqs = []
        for peer, o, c in recv_runs:
            if live is None or peer in live:
                reqs.append(comm.Irecv(rbuf[o:o + c], peer, tag))
            else:
                rbuf[o:o + c] = 0.0
        for peer, o, c in send_runs:
            if live is None or peer in live:
                reqs.append(comm.Isend(sbuf[o:o + c], peer, tag))
        return reqs

    return observed(team, "Ghosts", rbuf.nbytes + (0 if sbuf is None else sbuf.nbytes), start, peers)


def _complete_exchange(team: Team, reqs: list | None, nbytes: int) -> None:
    """Complete an exchange started by :func:`_post_exchange` (waiting politely, without spinning,
    when ranks outnumber cores: ``runtime.waiting``). Local."""
    if reqs is not None:        # also when the tuner started none of it: it pairs start and end
        observed(team, "Ghosts_wait", nbytes, waitall, reqs)


def _split_columns(rows, r0: int, r1: int):
    """Local rows (global columns) -> diagonal block, compressed off-diagonal block, ghost ids."""
    rows = rows.tocsr()
    cols = rows.indices.astype(np.int64)
    local = (cols >= r0) & (cols < r1)
    ghosts = np.unique(cols[~local])
    nloc = rows.shape[0]
    rid = np.repeat(np.arange(nloc), np.diff(rows.indptr))
    diag = sp.csr_matrix((rows.data[local], (rid[local], cols[local] - r0)), shape=(nloc, r1 - r0))
    off = sp.csr_matrix((rows.data[~local], (rid[~local], np.searchsorted(ghosts, cols[~local]))),
                        shape=(nloc, ghosts.size))
    diag.sum_duplicates()
    off.sum_duplicates()
    return diag, off, ghosts


def _upper(rows, r0: int):
    """The entries of the local rows on or above the global diagonal (``col >= row``)."""
    coo = rows.tocoo()
    keep = coo.col >= coo.row + r0
    return sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=rows.shape)


# ---------------------------------------------------------------------- fused symmetric kernel
_SYM_KERNEL = None


def _sym_kernel():
    """The numba kernel ``y += U x + strict_upper(U)^T x`` (one pass over U), or ``None``."""
    global _SYM_KERNEL
    if _SYM_KERNEL is None:
        try:
            import numba
        except ImportError:          # pragma: no cover - numba is a dependency
            _SYM_KERNEL = False
            return None

        @numba.njit(cache=True, nogil=True)
        def upper_symmetric_spmm(indptr, indices, data, x, y):   # pragma: no cover - compiled
            k = x.shape[1]
            for i in range(indptr.shape[0] - 1):
                for q in range(indptr[i], indptr[i + 1]):
                    j = indices[q]
                    v = data[q]
                    if j == i:
                        for c in range(k):
                            y[i, c] += v * x[i, c]
                    else:
                        for c in range(k):
                            y[i, c] += v * x[j, c]
                            y[j, c] += v * x[i, c]

        _SYM_KERNEL = upper_symmetric_spmm
    return _SYM_KERNEL or None


# ---------------------------------------------------------------------- the matrix
class DistCSR:
    """A sparse ``n x n`` matrix distributed by BLOCKED row blocks over a team.

    Build it with :meth:`from_scipy`, :meth:`from_mtx` or :meth:`from_generator` (all collective).
    Products (:meth:`matmat`, ``A @ X``) take and return this rank's rows of a block of vectors.

    Attributes
    ----------
    shape : tuple
        ``(n, n)``.
    nnz : int
        Nonzeros of the whole (logical) matrix; with half storage both triangles count.
    nnz_stored : int
        Nonzeros actually stored over all ranks.
    row_start, row_stop, local_rows : int
        This rank's rows.
    symmetric_half : bool
        Whether only the upper triangle is stored.
    backend : Backend
        Where the local blocks and the vectors live.
    """

    def __init__(self, rows, n: int, team: Team, backend, symmetric_half: bool, symmetric):
        """Internal: use the ``from_*`` constructors. ``rows`` are this rank's validated rows
        (CSR, global columns). Collective (builds the exchange plan)."""
        self.team = team
        self.n = n
        self.row_start, self.row_stop = block_range(n, team.size, team.rank)
        self.backend = backend
        self.symmetric_half = symmetric_half
        self._symmetric = True if symmetric_half else symmetric
        stored = _upper(rows, self.row_start) if symmetric_half else rows
        self._diag_blk, self._off_blk, ghosts = _split_columns(stored, self.row_start, self.row_stop)
        self._plan = _build_plan(team, n, self.row_start, ghosts)
        self._comm = _private_comm(team)
        self._diagonal = self._diag_blk.diagonal().copy()
        dcoo = self._diag_blk.tocoo()
        ndiag = int(np.count_nonzero(dcoo.row == dcoo.col))   # stored diagonal entries
        counts = np.array([stored.nnz, ndiag], np.int64)
        if team.size > 1:
            team.Allreduce(MPI.IN_PLACE, counts)
        self.nnz_stored = int(counts[0])
        self.nnz = int(2 * counts[0] - counts[1]) if symmetric_half else int(counts[0])
        if symmetric_half:
            self._scatter = sp.csr_matrix(
                (np.ones(self._plan.send_idx.size), (self._plan.send_idx, np.arange(self._plan.send_idx.size))),
                shape=(self.local_rows, self._plan.send_idx.size))
        self._dev = _DeviceMatrices(self) if backend.is_gpu else None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_scipy(cls, A, team: Team | None = None, backend="cpu", symmetric_half: bool = False,
                   symmetric: bool | None = None, root: int | None = 0) -> "DistCSR":
        """Distribute a SciPy sparse matrix (or a dense NumPy array). Collective.

        Parameters
        ----------
        A : scipy.sparse matrix or ndarray
            With ``root=r`` (default 0) only rank ``r``'s ``A`` is read (the others may pass
            ``None``); rank ``r`` checks it and sends each rank its rows (one ``Scatterv`` per
            array). With ``root=None`` every rank passes the same matrix and keeps its own rows
            without communication.
        team : Team, optional
            The ranks sharing the matrix (default: the world).
        backend : {"cpu", "gpu"} or Backend
        symmetric_half : bool
            Store only the upper triangle and use each stored nonzero twice (needs a symmetric A).
        symmetric : bool, optional
            ``True``: check that ``A`` is symmetric (done anyway for ``symmetric_half``);
            ``False``: a general matrix; ``None``: unknown until :meth:`is_symmetric` is asked.

        Raises
        ------
        InputError
            (a ``ValueError``) On every rank before the matrix is distributed: not square,
            complex, NaN/inf entries, not symmetric when symmetry is required, or a backend other
            than cpu/gpu.
        """
        team, be, need_sym = cls._common_args(team, backend, symmetric_half, symmetric)
        if root is None:
            csr, msg = _global_checks(A, "A", need_sym)
            if msg:
                raise InputError(msg)
            r0, r1 = block_range(csr.shape[0], team.size, team.rank)
            return cls(csr[r0:r1], csr.shape[0], team, be, symmetric_half, True if need_sym else symmetric)
        if not (isinstance(root, int) and 0 <= root < team.size):
            raise InputError(f"root must be a rank of the team (0..{team.size - 1}) or None, got {root!r}")
        csr, msg = (_global_checks(A, "A", need_sym) if team.rank == root else (None, None))
        return cls._scatter_from(csr, msg, root, team, be, symmetric_half, True if need_sym else symmetric)

    @classmethod
    def from_mtx(cls, path, team: Team | None = None, backend="cpu", symmetric_half: bool = False,
                 symmetric: bool | None = None) -> "DistCSR":
        """Read a Matrix Market file on rank 0 (``scipy.io.mmread``) and distribute it. Collective.

        A file declared ``symmetric`` is expanded to both triangles by ``mmread``. Errors (missing
        or unreadable file, not square, NaN, not symmetric when required) raise the same
        :class:`~hpcsuite.runtime.InputError` on every rank, naming the file.
        """
        team, be, need_sym = cls._common_args(team, backend, symmetric_half, symmetric)
        csr = msg = None
        if team.rank == 0:
            try:
                import scipy.io
                csr, msg = _global_checks(scipy.io.mmread(str(path)), "the matrix", need_sym)
            except FileNotFoundError:
                msg = "no such file"
            except (OSError, ValueError, IndexError, TypeError) as exc:
                msg = f"not a readable Matrix Market file ({type(exc).__name__}: {str(exc).strip()})"
            msg = f"{path}: {msg}" if msg else None
        return cls._scatter_from(csr, msg, 0, team, be, symmetric_half, True if need_sym else symmetric)

    @classmethod
    def from_generator(cls, n: int, rows_fn, team: Team | None = None, backend="cpu",
                       symmetric_half: bool = False, symmetric: bool | None = None) -> "DistCSR":
        """Build the matrix from its rows, each rank generating only its own. Collective.

        Parameters
        ----------
        n : int
            Global size.
        rows_fn : callable
            ``rows_fn(row_start, row_stop)`` returns rows ``row_start:row_stop`` as a SciPy sparse
            matrix (or array) of shape ``(row_stop - row_start, n)``. Not called on ranks that own
            no rows.

        The local results are checked (shape, NaN/inf) and, when symmetry is required, compared
        with the transpose through one ``Alltoallv`` of the nonzeros; a failure on any rank raises
        the same :class:`~hpcsuite.runtime.InputError` on every rank.
        """
        team, be, need_sym = cls._common_args(team, backend, symmetric_half, symmetric)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise InputError(f"n must be a positive integer, got {n!r}")
        n = int(n)
        r0, r1 = block_range(n, team.size, team.rank)
        rows, msg = sp.csr_matrix((0, n)), None
        if r1 > r0:
            try:
                rows, msg = _as_csr(rows_fn(r0, r1), f"rows_fn({r0}, {r1})")
            except Exception as exc:  # noqa: BLE001 - reported on every rank
                msg = f"rows_fn({r0}, {r1}) raised {type(exc).__name__}: {exc}"
            if msg is None and rows.shape != (r1 - r0, n):
                msg = f"rows_fn({r0}, {r1}) returned shape {rows.shape}, expected {(r1 - r0, n)}"
            if msg is None:
                msg = _nonfinite_msg(rows, r0, "the generated matrix")
        agree(team, raise_message, msg)
        if need_sym:
            agree(team, raise_message, _distributed_asymmetry(team, rows, n, r0, "the generated matrix"))
        return cls(rows, n, team, be, symmetric_half, True if need_sym else symmetric)

    @staticmethod
    def _common_args(team, backend, symmetric_half, symmetric):
        team = team if team is not None else Team.world()
        if not isinstance(team, Team):
            raise InputError(f"team must be a Team, got {team!r}")
        be = get_backend(backend)
        if be.name not in ("cpu", "gpu"):
            raise InputError(f"DistCSR supports the backends 'cpu' and 'gpu', got {be.name!r}")
        if symmetric_half and symmetric is False:
            raise InputError("symmetric_half=True needs a symmetric matrix, but symmetric=False was given")
        return team, be, bool(symmetric_half or symmetric)

    @classmethod
    def _scatter_from(cls, csr, msg, root, team, be, symmetric_half, symmetric) -> "DistCSR":
        """Rank ``root`` checked ``csr``; agree on the verdict, then scatter the row blocks."""
        meta = (msg, None if csr is None else csr.shape[0])
        msg, n = meta if team.size == 1 else team.bcast(meta, root=root)
        if msg:
            raise InputError(msg)
        if team.size == 1:
            return cls(csr, n, team, be, symmetric_half, symmetric)
        return cls(_scatter_rows(team, csr, n, root), n, team, be, symmetric_half, symmetric)

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def dtype(self):
        return np.dtype(np.float64)

    @property
    def local_rows(self) -> int:
        """The number of rows this rank owns."""
        return self.row_stop - self.row_start

    @property
    def ghost_count(self) -> int:
        """How many remote vector entries this rank receives per vector in a product."""
        return int(self._plan.ghosts.size)

    @property
    def neighbours(self) -> list[int]:
        """The ranks this rank exchanges vector rows with (sorted)."""
        return sorted(self._plan.peers)

    def __repr__(self) -> str:
        kind = "upper triangle" if self.symmetric_half else "full"
        return (f"DistCSR(shape={self.shape}, nnz={self.nnz}, {kind}, backend={self.backend.name!r}, "
                f"rows {self.row_start}:{self.row_stop} on rank {self.team.rank} of {self.team.size})")

    def diagonal(self):
        """This rank's part of the diagonal (length :attr:`local_rows`), on the backend. Local."""
        return self.backend.asarray(self._diagonal) if self.backend.is_gpu else self._diagonal.copy()

    def is_symmetric(self) -> bool:
        """Whether ``A == A.T`` to :data:`SYM_RTOL`; checked once (then cached). Collective the
        first time unless the matrix was built with a known symmetry."""
        if self._symmetric is None:
            msg = _distributed_asymmetry(self.team, self._stored_rows(), self.n, self.row_start, "A")
            flags = [msg is None] if self.team.size == 1 else self.team.allgather(msg is None)
            self._symmetric = all(flags)
        return bool(self._symmetric)

    # ------------------------------------------------------------------ products
    def matmat(self, X):
        """``A @ X`` for this rank's rows ``X`` (shape ``(local_rows, k)`` or ``(local_rows,)``).
        Collective (neighbour exchange). Returns an array of the same shape on the backend.

        Raises ``ValueError`` (on the calling rank, before communicating) when ``X`` does not have
        :attr:`local_rows` rows.
        """
        if hasattr(X, "pattern") and hasattr(X, "local"):           # a pgas.DistArray
            return self.to_distarray(self.matmat(self.local_block(X)))
        vector = getattr(X, "ndim", None) == 1
        if getattr(X, "ndim", None) not in (1, 2) or X.shape[0] != self.local_rows:
            raise ValueError(f"X must have this rank's {self.local_rows} rows (rows {self.row_start}:"
                             f"{self.row_stop} of {self.n}) and be 1-D or 2-D, got shape "
                             f"{getattr(X, 'shape', type(X).__name__)}")
        X2 = X[:, None] if vector else X
        if self._dev is not None:
            Y = self._dev.matmat(X2)
        else:
            X2 = np.ascontiguousarray(X2, dtype=np.float64)
            Y = self._matmat_half(X2) if self.symmetric_half else self._matmat_full(X2)
        return Y[:, 0] if vector else Y

    __matmul__ = matmat

    def _matmat_full(self, X: np.ndarray) -> np.ndarray:
        xg, reqs = self._start_forward(X)
        Y = self._diag_blk @ X                      # overlaps the messages in flight
        self._wait(reqs, xg.nbytes)
        if xg.shape[0]:
            Y += self._off_blk @ xg
        return Y

    def _matmat_half(self, X: np.ndarray) -> np.ndarray:
        xg, reqs = self._start_forward(X)
        Y = np.zeros_like(X)
        kernel = _sym_kernel()
        U = self._diag_blk
        if kernel is not None:
            kernel(U.indptr, U.indices, U.data, X, Y)
        else:                                        # two passes over U (same result)
            Y += U @ X + U.T @ X - self._diagonal[:, None] * X
        contrib, rbuf, rreqs = self._start_reverse(X)
        self._wait(reqs, xg.nbytes)
        if xg.shape[0]:
            Y += self._off_blk @ xg
        self._wait(rreqs, rbuf.nbytes)
        if rbuf.shape[0]:
            Y += self._scatter @ rbuf
        del contrib                                   # the send buffer lives until here
        return Y

    def _wait(self, reqs: list | None, nbytes: int) -> None:
        """Complete a neighbour exchange (see :func:`_complete_exchange`)."""
        _complete_exchange(self.team, reqs, nbytes)

    def _start_forward(self, X: np.ndarray):
        """Post the ghost receives and send the rows the neighbours need. Local (p2p)."""
        plan = self._plan
        xg = np.empty((plan.ghosts.size, X.shape[1]))
        sbuf = np.take(X, plan.send_idx, axis=0) if plan.send else None
        return xg, _post_exchange(self.team, self._comm, _TAG_FORWARD, xg, plan.recv, sbuf, plan.send)

    def _start_reverse(self, X: np.ndarray):
        """Half storage: send ``U_off^T x`` to the owners of the ghost rows, receive theirs."""
        k = X.shape[1]
        plan = self._plan
        rbuf = np.empty((plan.send_idx.size, k))
        contrib = np.ascontiguousarray(self._off_blk.T @ X) if plan.recv else np.empty((0, k))
        reqs = _post_exchange(self.team, self._comm, _TAG_REVERSE, rbuf, plan.send, contrib, plan.recv)
        return contrib, rbuf, reqs

    # ------------------------------------------------------------------ DistArray conversion
    def to_distarray(self, Y):
        """A ``pgas.DistArray`` of shape ``(n, k)`` (or ``(n,)``) holding this rank's rows ``Y``
        (BLOCKED rows, NONE columns). Collective."""
        return rows_to_distarray(Y, self.n, self.team, self.backend)

    def local_block(self, D):
        """This rank's rows of the ``pgas.DistArray`` ``D`` (shape ``(n, k)`` or ``(n,)``), on the
        backend; redistributed first unless it is BLOCKED by rows over this team. Collective."""
        return distarray_to_rows(D, self.n, self.team, self.backend)

    # ------------------------------------------------------------------ inspection
    def _stored_rows(self):
        """This rank's stored rows with global column indices (rebuilt from the two blocks)."""
        d, o = self._diag_blk.tocoo(), self._off_blk.tocoo()
        rows = np.concatenate([d.row, o.row])
        cols = np.concatenate([d.col.astype(np.int64) + self.row_start, self._plan.ghosts[o.col]])
        return sp.csr_matrix((np.concatenate([d.data, o.data]), (rows, cols)), shape=(self.local_rows, self.n))

    def to_scipy(self, root: int | None = 0):
        """The whole matrix (both triangles) as SciPy CSR on ``root`` (``None``: every rank);
        ``None`` elsewhere. Collective; for tests and small matrices."""
        mine = self._stored_rows().tocoo()
        part = (mine.row + self.row_start, mine.col, mine.data)
        parts = self.team.allgather(part) if root is None else self.team.gather(part, root)
        if parts is None:
            return None
        r, c, v = (np.concatenate(x) for x in zip(*parts))
        M = sp.csr_matrix((v, (r, c)), shape=self.shape)
        if self.symmetric_half:
            M = (M + sp.triu(M, 1).T).tocsr()
        return M


def _scatter_rows(team: Team, csr, n: int, root: int):
    """Send every rank its row block of ``csr`` (valid on ``root`` only). Collective."""
    p = team.size
    bounds = [block_range(n, p, r) for r in range(p)]
    if team.rank == root:
        counts = np.array([csr.indptr[b] - csr.indptr[a] for a, b in bounds], np.int64)
        rowlen = np.diff(csr.indptr).astype(np.int64)
        send_i = [np.ascontiguousarray(csr.indices, np.int64), counts, _displs(counts), MPI.INT64_T]
        send_v = [np.ascontiguousarray(csr.data), counts, _displs(counts), MPI.DOUBLE]
        rc = np.array([b - a for a, b in bounds], np.int64)
        send_r = [rowlen, rc, _displs(rc), MPI.INT64_T]
    else:
        counts = None
        send_i = send_v = send_r = None
    counts = team.bcast(counts, root=root)
    r0, r1 = bounds[team.rank]
    mine = int(counts[team.rank])
    idx, val, rl = np.empty(mine, np.int64), np.empty(mine), np.empty(r1 - r0, np.int64)
    comm = team.comm
    observed(team, "Scatterv", idx.nbytes, comm.Scatterv, send_i, [idx, MPI.INT64_T], root)
    observed(team, "Scatterv", val.nbytes, comm.Scatterv, send_v, [val, MPI.DOUBLE], root)
    observed(team, "Scatterv", rl.nbytes, comm.Scatterv, send_r, [rl, MPI.INT64_T], root)
    indptr = np.concatenate(([0], np.cumsum(rl)))
    return sp.csr_matrix((val, idx, indptr), shape=(r1 - r0, n))


def _distributed_asymmetry(team: Team, rows, n: int, r0: int, what: str) -> str | None:
    """Compare local rows with the same rows of the transpose: every nonzero ``(i, j, v)`` travels
    to the owner of row ``j`` (one Alltoall + one Alltoallv). Returns this rank's message or None.
    Collective."""
    coo = rows.tocoo()
    gi = coo.row.astype(np.int64) + r0
    gj = coo.col.astype(np.int64)
    dest = block_owners(gj, n, team.size)
    order = np.argsort(dest, kind="stable")
    trip = np.empty((coo.nnz, 3))
    trip[:, 0], trip[:, 1], trip[:, 2] = gj[order], gi[order], coo.data[order]
    counts = np.bincount(dest, minlength=team.size).astype(np.int64) * 3
    if team.size > 1:
        got = np.empty(team.size, np.int64)
        observed(team, "Alltoall", counts.nbytes, team.comm.Alltoall, [counts, MPI.INT64_T], [got, MPI.INT64_T])
        recv = np.empty(int(got.sum()))
        team.Alltoallv([trip.reshape(-1), counts, _displs(counts), MPI.DOUBLE],
                       [recv, got, _displs(got), MPI.DOUBLE])
        trip = recv.reshape(-1, 3)
    nloc = rows.shape[0]
    trans = sp.csr_matrix((trip[:, 2], (trip[:, 0].astype(np.int64) - r0, trip[:, 1].astype(np.int64))),
                          shape=(nloc, n))
    return _asymmetry_msg(rows.tocsr(), trans, r0, what)


# ---------------------------------------------------------------------- DistArray conversion
def _blocked_pattern(n: int, k: int | None, team: Team):
    from .. import pgas
    shape = (n,) if k is None else (n, k)
    dist = (pgas.BLOCKED,) if k is None else (pgas.BLOCKED, pgas.NONE)
    return shape, dist


def rows_to_distarray(Y, n: int, team: Team, backend="cpu"):
    """A new ``pgas.DistArray`` (BLOCKED rows, NONE columns) whose local block is ``Y``, this
    rank's rows. GPU arrays stay on the device (``device="gpu"``); ``"strict"`` arrays are copied
    to the host. Collective."""
    from .. import pgas
    be = get_backend(backend)
    k = None if Y.ndim == 1 else int(Y.shape[1])
    shape, dist = _blocked_pattern(n, k, team)
    # every rank must agree on the column count before allocating collectively
    ks = {k} if team.size == 1 else set(team.allgather(k))
    if len(ks) != 1:
        raise ValueError(f"the local blocks have different column counts on different ranks: "
                         f"{sorted(ks, key=str)}")
    D = pgas.zeros(shape, dist=dist, team=team, device="gpu" if be.is_gpu else "cpu")
    if D.local.shape != tuple(Y.shape):
        raise ValueError(f"local block of shape {tuple(Y.shape)} does not match the {D.local.shape} "
                         f"rows this rank owns in a BLOCKED ({n}, ...) array")
    D.local[...] = Y if be.is_gpu or be.is_host else be.to_host(Y)
    team.barrier()
    return D


def distarray_to_rows(D, n: int, team: Team, backend="cpu"):
    """This rank's rows of the ``pgas.DistArray`` ``D`` (shape ``(n,)`` or ``(n, k)``) on the
    backend: a view of ``D.local`` when ``D`` is BLOCKED by rows over ``team``, otherwise a copy
    after redistribution. Collective."""
    from .. import pgas
    from ..pgas.pattern import Pattern
    be = get_backend(backend)
    if D.ndim not in (1, 2) or D.shape[0] != n:
        raise ValueError(f"the DistArray must have shape ({n},) or ({n}, k), got {D.shape}")
    k = None if D.ndim == 1 else D.shape[1]
    shape, dist = _blocked_pattern(n, k, team)
    if D.pattern == Pattern(shape, dist, team=team) and not any(D.halo_width):
        block = D.local
    else:
        tmp = pgas.zeros(shape, dist=dist, team=team)
        pgas.copy(D, tmp)
        block = tmp.local.copy()
        tmp.free()
    if be.is_host:
        return np.asarray(block)
    return be.asarray(block)


# ---------------------------------------------------------------------- GPU side
class _DeviceMatrices:
    """The local blocks as cupyx CSR matrices on this rank's GPU. Ghost rows go to MPI as device
    buffers with a CUDA-aware MPI (``runtime.gpu_aware_mpi``), else staged through the host."""

    def __init__(self, A: DistCSR):
        import cupyx.scipy.sparse as csp
        self.A, self.be = A, A.backend
        xp = self.be.runtime_device.xp
        self.diag_blk = csp.csr_matrix(A._diag_blk)
        self.off_blk = csp.csr_matrix(A._off_blk) if A._plan.ghosts.size else None
        self.send_idx = xp.asarray(A._plan.send_idx)
        self.diagonal = xp.asarray(A._diagonal)[:, None]
        self.scatter = csp.csr_matrix(A._scatter) if A.symmetric_half and A._scatter.nnz else None
        self.xp = xp
        self.aware = gpu_aware_mpi()
        self.bufs = xp if self.aware else np          # where exchanged rows live

    def _to_mpi(self, a):
        """A device block as MPI will read it: as it is (after the GPU is done) or on the host."""
        if self.aware:
            self.be.synchronize()
            return a
        return self.be.to_host(a)

    def _from_mpi(self, a):
        return a if self.aware else self.be.asarray(a)

    def _forward(self, X):
        plan = self.A._plan
        xg = self.bufs.empty((plan.ghosts.size, X.shape[1]))
        sbuf = self._to_mpi(X[self.send_idx]) if plan.send else None     # gathered on the device
        reqs = _post_exchange(self.A.team, self.A._comm, _TAG_FORWARD, xg, plan.recv, sbuf, plan.send)
        return xg, reqs, sbuf

    def matmat(self, X):
        xp = self.xp
        X = xp.ascontiguousarray(xp.asarray(X, dtype=xp.float64))
        if self.A.local_rows == 0:       # no rows: nothing to send or receive; no empty cuSPARSE calls
            return xp.zeros((0, X.shape[1]))
        xg, reqs, keep = self._forward(X)
        if self.A.symmetric_half:
            U = self.diag_blk
            Y = U @ X + U.T @ X - self.diagonal * X       # cuSPARSE: U and U^T products
            rbuf, rreqs, contrib = self._reverse(X)
        else:
            Y = self.diag_blk @ X                          # queued on the GPU while MPI waits
        self.A._wait(reqs, xg.nbytes)
        if xg.shape[0] and self.off_blk is not None:
            Y += self.off_blk @ self._from_mpi(xg)
        if self.A.symmetric_half:
            self.A._wait(rreqs, rbuf.nbytes)
            if rbuf.shape[0] and self.scatter is not None:
                Y += self.scatter @ self._from_mpi(rbuf)
            del contrib
        del keep
        return Y

    def _reverse(self, X):
        plan = self.A._plan
        rbuf = self.bufs.empty((plan.send_idx.size, X.shape[1]))
        contrib = None
        if plan.recv:               # ghosts exist, so off_blk does too
            contrib = self._to_mpi(self.xp.ascontiguousarray(self.off_blk.T @ X))
        reqs = _post_exchange(self.A.team, self.A._comm, _TAG_REVERSE, rbuf, plan.send, contrib, plan.recv)
        return rbuf, reqs, contrib

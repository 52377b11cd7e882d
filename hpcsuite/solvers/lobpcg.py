"""Distributed LOBPCG for a few extreme eigenpairs of ``A x = lambda B x`` (A symmetric, B SPD).

One source for NumPy, CuPy and the strict array-API checker: every operation on the ``n``-sized
blocks (local rows x block width) goes through ``backend.xp`` and stays on the device; only the
small dense problems (Gram matrices, Rayleigh-Ritz, coefficients: at most ``3m x 3m`` for a block
of ``m`` vectors) travel to the host, where they are summed over the ranks with one ``Allreduce``
and solved redundantly on every rank with LAPACK.

Algorithm (Knyazev's LOBPCG in the robust form of Hetmaniuk & Lehoucq 2006 and Duersch, Shao, Yang
& Gu 2018):

* the basis is ``S = [X, P, W]``: Ritz vectors, search directions, preconditioned residuals;
* ``W`` is B-orthogonalised against ``[X, P]`` (classical Gram-Schmidt, a second pass when the
  first cancels more than 99 % of a column) and B-orthonormalised by SVQB (eigen-decomposition of
  its Gram matrix; dependent directions are dropped instead of breaking a Cholesky factorisation);
* Rayleigh-Ritz uses the *computed* Gram matrices ``S^T A S`` and ``S^T B S`` (one Allreduce for
  both) and again SVQB on ``S^T B S``, so a basis that lost orthogonality is still handled exactly;
* the new ``P`` is an orthonormal basis of ``span{X_old, X_new}`` orthogonal to ``X_new``, built
  from the small eigenvector matrix (no ill-conditioned ``P`` as in the textbook recurrence);
* soft locking: converged columns stop contributing residuals and directions but stay in the basis;
* ``AX`` (``BX``) is a fresh product every step for sparse matrices with at most ``m`` nonzeros
  per row (cheaper than updating its image of the basis), otherwise updated implicitly and
  recomputed before convergence is reported, so the reported residuals are true ones;
* without preconditioner and with ``B = I`` the residuals are already orthogonal to ``[X, P]``
  (Rayleigh-Ritz makes them so) and the Gram-Schmidt pass is skipped; the computed ``S^T W``
  block of the Rayleigh-Ritz step still absorbs any loss of orthogonality.

Convergence: the relative residual of a pair is ``||A x - lambda B x|| / (theta_max ||B x||)``
where ``theta_max`` is the largest ``|Ritz value|`` seen in any Rayleigh-Ritz step (an estimate of
the spread of the spectrum; it makes the test independent of the scaling of A and B and still
meaningful for eigenvalues near zero). Default ``tol = min(n * sqrt(eps), 1e-5)``: SciPy's formula,
made relative, and capped so large problems still get eigenvalues to about ``1e-10`` of the
spectral spread. Default ``maxiter = 20 * max(block_size, 10)``. Not converging is never silent:
a ``UserWarning`` lists the residuals and the result has ``converged=False``.

Requirement on MPI: decisions (active columns, dropped directions) are taken redundantly on every
rank from ``Allreduce`` results, which must be bitwise identical on all ranks (true for MPICH's and
Open MPI's algorithms for commutative sums).

Examples
--------
With ``mpiexec -n 4``::

    >>> from scipy.sparse.linalg import LaplacianNd
    >>> A = DistCSR.from_scipy(-LaplacianNd((10, 10, 10)).tosparse() if rank == 0 else None)
    >>> res = lobpcg(A, 6, M="jacobi", tol=1e-8)
    >>> res.eigenvalues              # the 6 smallest, ascending, on every rank
    >>> res.eigenvectors             # a pgas.DistArray (1000, 6), BLOCKED rows
"""
from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from ..accel import get_backend
from ..runtime import InputError, Team, agree, block_range, raise_message
from .sparse import DistCSR, distarray_to_rows, rows_to_distarray

__all__ = ["lobpcg", "LobpcgResult", "RowOperator", "default_tol", "default_maxiter"]

_EPS = float(np.finfo(np.float64).eps)
_DROP = 1e-12          # SVQB: keep directions whose scaled Gram eigenvalue exceeds this * largest
_CANCEL = 1e-2         # second Gram-Schmidt pass when a column keeps less than this of its norm^2
_NOISE = 1e-26         # a column keeping less than this of its norm^2 is rounding noise: dropped
_CHOL_MIN = 1e-8       # Cholesky-QR only while the scaled Gram matrix is this far from singular


def default_tol(n: int) -> float:
    """The default relative residual tolerance: ``min(n * sqrt(eps), 1e-5)``."""
    return min(n * math.sqrt(_EPS), 1e-5)


def default_maxiter(block_size: int) -> int:
    """The default iteration limit: ``20 * max(block_size, 10)``."""
    return 20 * max(block_size, 10)


@dataclass
class LobpcgResult:
    """What :func:`lobpcg` returns (the same on every rank, except the local eigenvector rows).

    Attributes
    ----------
    eigenvalues : ndarray (k,)
        Ascending (also for ``largest=True``).
    eigenvectors : pgas.DistArray (n, k)
        B-orthonormal, BLOCKED rows; column ``j`` belongs to ``eigenvalues[j]``.
    residual_norms : ndarray (k,)
        Relative residuals ``||A x - lambda B x|| / (theta_max ||B x||)`` of the returned pairs,
        from freshly computed products when ``converged``.
    iterations : int
    converged : bool
        All ``k`` residuals are at most ``tol``.
    residual_history : list of ndarray
        The ``k`` relative residuals after each iteration (entry 0: the starting block).
    tol, theta_max : float
        The tolerance used and the scale in the residual's denominator.
    matvecs : int
        Columns multiplied by ``A`` on this rank (the work measure).
    """

    eigenvalues: np.ndarray
    eigenvectors: Any
    residual_norms: np.ndarray
    iterations: int
    converged: bool
    residual_history: list = field(default_factory=list)
    tol: float = 0.0
    theta_max: float = 0.0
    matvecs: int = 0


class RowOperator:
    """A symmetric operator given by a function on local row blocks (for :func:`lobpcg`). Creating
    one is local; its ``matmat`` is called collectively.

    Parameters
    ----------
    n : int
        Global size.
    matmat : callable
        ``matmat(X) -> Y``: this rank's rows of ``A @ X`` from its rows of ``X`` (arrays of the
        solver's backend, shape ``(local_rows, k)``). Called collectively.
    team : Team, optional
        Default: the world. Rows are split BLOCKED (as ``pgas.DistArray`` and :class:`DistCSR`).
    diagonal : callable, optional
        ``diagonal()`` -> this rank's diagonal entries (for ``M="jacobi"``).
    """

    def __init__(self, n: int, matmat: Callable, team: Team | None = None, diagonal: Callable | None = None):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        if not callable(matmat):
            raise ValueError(f"matmat must be callable, got {type(matmat).__name__}")
        self.team = team if team is not None else Team.world()
        self.n = int(n)
        self.row_start, self.row_stop = block_range(self.n, self.team.size, self.team.rank)
        self._matmat, self._diagonal = matmat, diagonal

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def local_rows(self) -> int:
        return self.row_stop - self.row_start

    def matmat(self, X):
        """This rank's rows of ``A @ X``. Collective if the function is."""
        return self._matmat(X)

    def diagonal(self):
        """This rank's diagonal entries. Local."""
        if self._diagonal is None:
            raise ValueError("this RowOperator has no diagonal; pass diagonal= to use M='jacobi'")
        return self._diagonal()


# ---------------------------------------------------------------------- argument handling
def _as_operator(A, what: str, team: Team | None, backend):
    """``A`` as an object with ``shape``, ``team``, ``row_start/stop`` and ``matmat``."""
    import scipy.sparse as sp
    if sp.issparse(A) or isinstance(A, np.ndarray):
        # every rank holds the same matrix: keep own rows, no communication
        return DistCSR.from_scipy(A, team=team, backend=backend, symmetric=True, root=None)
    need = ("shape", "matmat", "team", "row_start", "row_stop")
    if not all(hasattr(A, attr) for attr in need):
        raise ValueError(f"{what} must be a DistCSR, a RowOperator, a SciPy sparse matrix or an object "
                         f"with {', '.join(need)}; got {type(A).__name__}")
    if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{what} must be square, got shape {A.shape}")
    return A


def _check_sizes(k, block_size, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if 5 * k >= n:
        raise ValueError(f"k = {k} eigenpairs of an {n} x {n} matrix: LOBPCG needs 5k < n; for so large a "
                         f"part of the spectrum use a dense solver (scipy.linalg.eigh)")
    m = k if block_size is None else block_size
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < k:
        raise ValueError(f"block_size must be an integer >= k = {k}, got {block_size!r}")
    if 5 * m >= n:
        raise ValueError(f"block_size = {m} for n = {n}: LOBPCG needs 5 * block_size < n")
    return int(m)


def _check_scalars(tol, maxiter, n: int, m: int) -> tuple[float, int]:
    if tol is None:
        tol = default_tol(n)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not (0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1) (a relative residual), got {tol!r}")
    if maxiter is None:
        maxiter = default_maxiter(m)
    if isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer)) or maxiter < 0:
        raise ValueError(f"maxiter must be a non-negative integer, got {maxiter!r}")
    return float(tol), int(maxiter)


def _random_rows(r0: int, r1: int, m: int, seed: int, chunk: int = 4096) -> np.ndarray:
    """Rows ``r0:r1`` of a seeded Gaussian ``n x m`` block, the same whatever the rank count
    (generated in fixed chunks of rows, each from its own seed)."""
    out = np.empty((r1 - r0, m))
    if r1 <= r0:
        return out
    for c in range(r0 // chunk, (r1 - 1) // chunk + 1):
        block = np.random.default_rng([seed, c]).standard_normal((chunk, m))
        lo, hi = max(c * chunk, r0), min((c + 1) * chunk, r1)
        out[lo - r0:hi - r0] = block[lo - c * chunk:hi - c * chunk]
    return out


def _starting_block(X, op, m: int, k: int, seed: int, be):
    """This rank's rows of the starting block on the backend, or a message."""
    n, r0, r1 = op.shape[0], op.row_start, op.row_stop
    if X is None:
        return _random_rows(r0, r1, m, seed), None
    if hasattr(X, "pattern") and hasattr(X, "local"):                  # pgas.DistArray
        if X.ndim != 2 or X.shape[0] != n or X.shape[1] not in (k, m):
            return None, f"X must have shape ({n}, {k}) or ({n}, {m}), got {X.shape}"
        host = be.to_host(distarray_to_rows(X, n, op.team, be)) if not be.is_host else \
            np.asarray(distarray_to_rows(X, n, op.team, be))
    else:
        Xa = np.asarray(X)
        if Xa.ndim != 2 or Xa.shape[0] != n or Xa.shape[1] not in (k, m):
            return None, (f"X must be the whole ({n}, {k}) starting block (the same on every rank) "
                          f"or a DistArray, got shape {Xa.shape}")
        host = np.asarray(Xa[r0:r1], dtype=np.float64)
    if not np.isfinite(host).all():
        return None, "X has NaN or inf entries"
    if host.shape[1] < m:         # widen a k-column guess to the block size with random columns
        host = np.hstack([host, _random_rows(r0, r1, m, seed)[:, host.shape[1]:]])
    return host, None


def _preconditioner(M, op, be, probe):
    """``M`` as a function on local row blocks (or None), and a message if it cannot work."""
    xp = be.xp
    if M is None:
        return None, None
    if isinstance(M, str):
        if M != "jacobi":
            return None, f"M must be None, 'jacobi' or a callable, got {M!r}"
        if not hasattr(op, "diagonal"):
            return None, "M='jacobi' needs A.diagonal(); A has none"
        d = xp.reshape(xp.abs(be.asarray(op.diagonal())), (-1, 1))
        if d.shape[0] != op.row_stop - op.row_start:
            return None, "A.diagonal() does not have this rank's rows"
        if bool(xp.any(d == 0.0)) or not bool(xp.all(xp.isfinite(d))):
            return None, "M='jacobi' needs a nonzero, finite diagonal of A"
        return _Jacobi(1.0 / d), None
    if not callable(M):
        return None, f"M must be None, 'jacobi' or a callable on local row blocks, got {type(M).__name__}"
    try:
        out = M(probe)
    except Exception as exc:  # noqa: BLE001 - reported collectively
        return None, f"the preconditioner M raised {type(exc).__name__}: {exc}"
    if tuple(getattr(out, "shape", ())) != tuple(probe.shape):
        return None, (f"the preconditioner M must return an array of the shape it is given "
                      f"{tuple(probe.shape)}, got {getattr(out, 'shape', type(out).__name__)}")
    return M, None


# ---------------------------------------------------------------------- small dense helpers
def _svqb(G: np.ndarray, mask: np.ndarray | None = None):
    """``(T, indefinite)``: ``T`` with ``T^T G T = I`` for the Gram matrix ``G`` of a block
    (columns where ``mask`` is False are dropped); ``indefinite`` is True when ``G`` has a negative
    diagonal entry or eigenvalue beyond rounding (B is not positive definite).

    Cholesky of the diagonally scaled matrix when it is safely positive definite (the usual case:
    the block is nearly orthonormal); otherwise SVQB, the eigen-decomposition, which drops
    near-dependent directions instead of failing."""
    d = np.diag(G).copy()
    indefinite = bool(np.any(d < -1e3 * _EPS * max(float(np.max(np.abs(d))), 0.0))) if d.size else False
    good = d > 0 if mask is None else (d > 0) & mask
    s = np.where(good, 1.0 / np.sqrt(np.where(good, d, 1.0)), 0.0)
    Gs = s[:, None] * G * s[None, :]
    if good.all():
        try:
            L = np.linalg.cholesky(Gs)
            if np.min(np.diag(L)) ** 2 > _CHOL_MIN:
                return s[:, None] * np.linalg.inv(L).T, indefinite
        except np.linalg.LinAlgError:
            pass
    w, V = np.linalg.eigh(Gs)
    top = max(float(w[-1]), 0.0) if w.size else 0.0
    keep = w > _DROP * top if top > 0 else np.zeros(w.shape, bool)
    indefinite = indefinite or bool(w.size and w[0] < -1e3 * _EPS * max(top, 1.0))
    return (s[:, None] * V[:, keep]) / np.sqrt(w[keep]), indefinite


def _select(theta: np.ndarray, m: int, largest: bool) -> np.ndarray:
    order = np.argsort(theta, kind="stable")
    return order[::-1][:m] if largest else order[:m]


def _sym(G: np.ndarray) -> np.ndarray:
    return 0.5 * (G + G.T)


class _NotPD(ValueError):
    pass


# ---------------------------------------------------------------------- the iteration
class _Solver:
    """State of one LOBPCG run: local row blocks on the device, small matrices on the host.

    The basis ``S = [X | P | W]`` and its images ``A S`` (and ``B S``) live in preallocated
    ``local rows x 3m`` buffers, so Gram matrices and updates are single matrix products on column
    slices, written in place (``out=`` on NumPy and CuPy), with no concatenation of n-sized blocks;
    the next ``[X | P]`` goes into a second set of buffers (ping-pong)."""

    def __init__(self, opA, opB, prec, be, team, m, k, largest):
        self.opA, self.opB, self.prec, self.be, self.xp = opA, opB, prec, be, be.xp
        self.team, self.m, self.k, self.largest = team, m, k, largest
        self.theta_max = 0.0
        self.matvecs = 0
        self.np_ = 0                    # columns of P (between X and W in the buffers)
        self.thetaP = None
        # A X (B X) by a fresh product each step when that is cheaper than updating the n x 3m
        # image buffer (sparse operators with few nonzeros per row); else implicit updates
        self.fresh_a, self.fresh_b = _cheap(opA, m), opB is None or _cheap(opB, m)
        # with B = I and no preconditioner the residuals are orthogonal to [X, P] already
        self.project = prec is not None or opB is not None
        # array module with out= for in-place products (None: the strict checker, no out=)
        self._mod = np if be.is_host else (be.runtime_device.xp if be.is_gpu else None)

    # ------------------------------------------------------------------ buffers and views
    def _zeros(self, nloc: int):
        """A ``local rows x 3m`` buffer in column-major order on NumPy and CuPy: every block of
        columns (X, P, W) is then one contiguous piece of memory, so the elementwise passes and
        column norms on a block run at streaming speed (on a row-major buffer they stride: about
        8x slower measured at 20000 x 24); the GEMMs do not mind either layout."""
        shape = (nloc, 3 * self.m)
        return self._mod.zeros(shape, order="F") if self._mod is not None else self.be.zeros(shape)

    def _allocate(self, nloc: int) -> None:
        self.S, self.S2 = self._zeros(nloc), self._zeros(nloc)
        self.AS, self.AS2 = self._zeros(nloc), self._zeros(nloc)
        self.BS = self.BS2 = None
        if self.opB is not None:
            self.BS, self.BS2 = self._zeros(nloc), self._zeros(nloc)

    def _bs(self):
        """The buffer holding B S (S itself when B is the identity)."""
        return self.S if self.opB is None else self.BS

    @property
    def X(self):
        return self.S[:, :self.m]

    @property
    def AX(self):
        return self.AS[:, :self.m]

    @property
    def BX(self):
        return self._bs()[:, :self.m]

    # ------------------------------------------------------------------ kernels
    def mm_into(self, out, a, b) -> None:
        """``out[...] = a @ b`` (no temporary on NumPy / CuPy; ``out`` must not overlap a, b)."""
        if self._mod is not None:
            self._mod.matmul(a, b, out=out)
        else:
            out[...] = self.xp.matmul(a, b)

    def applyA(self, Y):
        self.matvecs += int(Y.shape[1])
        return self.opA.matmat(Y)

    def applyB(self, Y):
        return Y if self.opB is None else self.opB.matmat(Y)

    def reduce(self, local) -> np.ndarray:
        """Sum a small device array over the ranks: one copy to the host, one Allreduce."""
        host = np.array(self.be.to_host(local), dtype=np.float64)
        if self.team.size > 1:
            self.team.Allreduce(MPI.IN_PLACE, host)
        return host

    def colsq(self, Y):
        """Column sums of squares of a local block (no temporary block)."""
        return self.xp.vecdot(Y, Y, axis=-2)

    def dev(self, C: np.ndarray):
        return self.be.asarray(np.ascontiguousarray(C, dtype=np.float64))

    def cols(self, Y, idx: np.ndarray):
        if idx.size == Y.shape[1] and np.array_equal(idx, np.arange(Y.shape[1])):
            return Y
        return self.xp.take(Y, self.be.asarray(idx.astype(np.int64)), axis=1)

    # ------------------------------------------------------------------ start
    def start(self, X0) -> None:
        """B-orthonormalise the starting block and rotate it to Ritz vectors."""
        xp, m = self.xp, self.m
        self._allocate(X0.shape[0])
        self.S[:, :m] = X0
        if self.opB is not None:
            self.BS[:, :m] = self.applyB(self.X)
        G = self.reduce(xp.matmul(self.X.T, self.BX))
        T, indefinite = _svqb(_sym(G))
        if indefinite:
            raise _NotPD("B is not positive definite: x^T B x < 0 for a starting vector")
        if T.shape[1] < m:
            raise ValueError(f"the starting vectors are linearly dependent (rank {T.shape[1]} < {m})")
        self._rotate_x(self.dev(T), with_a=False)
        self.AS[:, :m] = self.applyA(self.X)
        theta, Z = np.linalg.eigh(_sym(self.reduce(xp.matmul(self.X.T, self.AX))))
        self.theta_max = max(self.theta_max, float(np.max(np.abs(theta))))
        sel = _select(theta, m, self.largest)
        self._rotate_x(self.dev(Z[:, sel]), with_a=True)
        self.lam = theta[sel]

    def _rotate_x(self, Td, with_a: bool) -> None:
        """X <- X T (and B X, and A X if ``with_a``), through the spare buffers."""
        m = self.m
        pairs = [(self.S, self.S2)] + ([(self.AS, self.AS2)] if with_a else []) + \
            ([(self.BS, self.BS2)] if self.opB is not None else [])
        for cur, spare in pairs:
            self.mm_into(spare[:, :m], cur[:, :m], Td)
            cur[:, :m] = spare[:, :m]

    def refresh(self) -> None:
        """Recompute ``AX`` and ``BX`` with fresh products (drift of the implicit updates) and the
        eigenvalues as explicit Rayleigh quotients ``x^T A x / x^T B x``."""
        xp, m = self.xp, self.m
        if not self.fresh_a:
            self.AS[:, :m] = self.applyA(self.X)
        if self.opB is not None and not self.fresh_b:
            self.BS[:, :m] = self.applyB(self.X)
        q = self.reduce(xp.concat([xp.vecdot(self.X, self.AX, axis=-2), xp.vecdot(self.X, self.BX, axis=-2)]))
        self.lam = q[:m] / q[m:]

    # ------------------------------------------------------------------ residuals
    def residuals(self) -> np.ndarray:
        """Relative residuals of all block columns. The residuals ``R`` are formed in the W slot of
        the basis buffer, preconditioned there, and in the same Allreduce as their norms goes the
        Gram matrix ``[X, P, W]^T B W``: the first Gram-Schmidt step of the next expansion (one
        synchronisation per iteration saved)."""
        xp, m, p0 = self.xp, self.m, self.m + self.np_
        W = self.S[:, p0:p0 + m]
        lam = self.dev(self.lam[None, :])
        if self._mod is not None:
            self._mod.multiply(self.BX, lam, out=W)
            self._mod.subtract(self.AX, W, out=W)
        else:
            W[...] = self.AX - self.BX * lam
        rn2, bn2 = self.colsq(W), self.colsq(self.BX)
        if self.prec is not None:
            if isinstance(self.prec, _Jacobi):
                W *= self.prec.inv
            else:
                W[...] = self.prec(W)
        if self.opB is not None:
            self.BS[:, p0:p0 + m] = self.applyB(W)
        BW = self._bs()[:, p0:p0 + m]
        gram = xp.matmul(self.S[:, (0 if self.project else p0):p0 + m].T, BW)
        sums = self.reduce(xp.concat([rn2, bn2, xp.reshape(gram, (-1,))]))
        self.G1 = sums[2 * m:].reshape(gram.shape)
        rn, bn = np.sqrt(sums[:m]), np.sqrt(sums[m:2 * m])
        scale = (self.theta_max if self.theta_max > 0 else 1.0) * bn
        return np.where(rn == 0, 0.0, rn / np.maximum(scale, np.finfo(np.float64).tiny))

    # ------------------------------------------------------------------ one step
    def step(self, active: np.ndarray) -> bool:
        """Expand with the preconditioned residuals of the ``active`` columns and do Rayleigh-Ritz.
        Returns False when no new direction survives (stagnation)."""
        m, p0, na = self.m, self.m + self.np_, active.size
        if na < m:                      # move the active columns to the front of the W slot
            for buf in [self.S] + ([self.BS] if self.opB is not None else []):
                buf[:, p0:p0 + na] = self.cols(buf[:, p0:p0 + m], active)
        q = p0 if self.project else 0
        G = np.concatenate([self.G1[:q, active], self.G1[q:][active][:, active]], axis=0)
        nw = self.orthonormalise(na, G)
        if nw == 0:
            return False
        self.AS[:, p0:p0 + nw] = self.applyA(self.S[:, p0:p0 + nw])
        return self.rayleigh_ritz(nw, active)

    def _project(self, na: int, G=None):
        """One classical Gram-Schmidt pass of the W slot (``na`` columns) against [X, P] in the B
        inner product, in place, given (or computing, one Allreduce) ``G = [X, P, W]^T B W``.
        Returns the Gram matrix of W before and after the pass (the latter by Pythagoras)."""
        p0 = self.m + self.np_
        W, BW = self.S[:, p0:p0 + na], self._bs()[:, p0:p0 + na]
        if G is None:
            G = self.reduce(self.xp.matmul(self.S[:, :p0 + na].T, BW))
        C, G0 = G[:p0], _sym(G[p0:])
        Cd = self.dev(C)
        W -= self.xp.matmul(self.S[:, :p0], Cd)
        if self.opB is not None:
            BW -= self.xp.matmul(self.BS[:, :p0], Cd)
        return G0, _sym(G0 - C.T @ C)

    def orthonormalise(self, na: int, G) -> int:
        """B-orthogonalise the W slot against [X, P], then B-orthonormalise it (SVQB), in place.
        Columns that were (almost) inside span{X, P} are dropped; returns how many are left."""
        p0 = self.m + self.np_
        G0, Gw = self._project(na, G) if self.project else (G, G)
        d0 = np.diag(G0)
        safe = np.where(d0 > 0, d0, 1.0)
        kept = np.where(d0 > 0, np.diag(Gw) / safe, 0.0)      # fraction of |w|^2 left
        if np.any(kept < _CANCEL):     # heavy cancellation: Pythagoras is inaccurate, project again
            _, Gw = self._project(na)
            kept = np.where(d0 > 0, np.diag(Gw) / safe, 0.0)
        T, _ = _svqb(Gw, mask=kept > _NOISE)
        nw = T.shape[1]
        if nw:
            Td = self.dev(T)
            for cur, spare in [(self.S, self.S2)] + ([(self.BS, self.BS2)] if self.opB is not None else []):
                self.mm_into(spare[:, :nw], cur[:, p0:p0 + na], Td)
                cur[:, p0:p0 + nw] = spare[:, :nw]
        return nw

    def rayleigh_ritz(self, nw: int, active: np.ndarray) -> bool:
        """Rayleigh-Ritz on S = [X, P, W]. The [X, P] blocks of S^T A S and S^T B S are known from
        the previous step (Ritz values, identity); the blocks with W are computed (one Allreduce)."""
        xp, m, p0 = self.xp, self.m, self.m + self.np_
        ns = p0 + nw
        S = self.S[:, :ns]
        G = self.reduce(xp.concat([xp.matmul(S.T, self.AS[:, p0:ns]), xp.matmul(S.T, self._bs()[:, p0:ns])],
                                  axis=1))
        GA, GB = self.known_blocks(G, nw)
        T, indefinite = _svqb(GB)
        if indefinite:
            raise _NotPD("B is not positive definite: the Gram matrix S^T B S has a negative eigenvalue")
        if T.shape[1] < m:
            return False
        theta, Z = np.linalg.eigh(_sym(T.T @ GA @ T))
        self.theta_max = max(self.theta_max, float(np.max(np.abs(theta))))
        sel = _select(theta, m, self.largest)
        others = np.ones(theta.size, bool)
        others[sel] = False
        rest = np.flatnonzero(others)
        # P: an orthonormal basis of span{X_old(active), X_new} orthogonal to X_new
        Y = Z[:, rest].T @ (T.T @ GB[:, active])
        U, sig = (np.linalg.svd(Y, full_matrices=False)[:2] if Y.size else (np.zeros((rest.size, 0)), np.zeros(0)))
        U = U[:, sig > 1e3 * _EPS]
        C = np.hstack([T @ Z[:, sel], T @ Z[:, rest] @ U])
        Cd = self.dev(C)
        self.mm_into(self.S2[:, :C.shape[1]], S, Cd)
        self.S, self.S2 = self.S2, self.S
        if not self.fresh_a:
            self.mm_into(self.AS2[:, :C.shape[1]], self.AS[:, :ns], Cd)
            self.AS, self.AS2 = self.AS2, self.AS
        if self.opB is not None and not self.fresh_b:
            self.mm_into(self.BS2[:, :C.shape[1]], self.BS[:, :ns], Cd)
            self.BS, self.BS2 = self.BS2, self.BS
        self.np_ = U.shape[1]
        if self.fresh_a:
            self.AS[:, :m] = self.applyA(self.X)
        if self.opB is not None and self.fresh_b:        # B P is needed too (Gram-Schmidt)
            self.BS[:, :m + self.np_] = self.applyB(self.S[:, :m + self.np_])
        self.thetaP = U.T @ (theta[rest][:, None] * U) if self.np_ else None
        self.lam = theta[sel]
        return True

    def known_blocks(self, G: np.ndarray, nw: int):
        """Assemble S^T A S and S^T B S from the computed W columns ``G = S^T [AW, BW]`` and the
        blocks known exactly from the last Rayleigh-Ritz step: X^T A X = diag(lambda),
        P^T A P = U^T diag(theta_rest) U, X^T A P = 0, [X P]^T B [X P] = I."""
        ns = G.shape[0]
        nq = ns - nw
        GA, GB = np.zeros((ns, ns)), np.eye(ns)
        GA[:self.m, :self.m] = np.diag(self.lam)
        if self.np_:
            GA[self.m:nq, self.m:nq] = self.thetaP
        GA[:, nq:], GB[:, nq:] = G[:, :nw], G[:, nw:]
        GA[nq:, :nq], GB[nq:, :nq] = G[:nq, :nw].T, G[:nq, nw:].T
        return _sym(GA), _sym(GB)


def _cheap(op, m: int) -> bool:
    """Whether a product with ``op`` costs less than updating its image of the basis (a dense
    ``n x 3m`` by ``3m x 2m`` product, ~12 m^2 flops per row at BLAS speed): sparse matrices with
    at most ``m`` nonzeros per row (SpMM runs several times slower per flop than GEMM; measured
    on 3-D stencils and random sparse matrices, bench/solvers_lobpcg.py)."""
    nnz = getattr(op, "nnz", None)
    return isinstance(nnz, (int, np.integer)) and nnz <= m * op.shape[0]


class _Jacobi:
    """``R -> R / |diag(A)|`` (applied in place inside the solver)."""

    def __init__(self, inv):
        self.inv = inv

    def __call__(self, R):
        return R * self.inv


# ---------------------------------------------------------------------- the driver
def lobpcg(A, k: int, X=None, B=None, M=None, tol: float | None = None, maxiter: int | None = None,
           largest: bool = False, backend=None, seed: int = 0, verbosity: int = 0,
           block_size: int | None = None, callback: Callable | None = None) -> LobpcgResult:
    """The ``k`` smallest (or largest) eigenpairs of ``A x = lambda B x``. Collective.

    Parameters
    ----------
    A : DistCSR, RowOperator, or an object with ``shape``, ``team``, ``row_start``, ``row_stop``
        (the BLOCKED row split) and ``matmat`` (on local row blocks); a SciPy sparse matrix or
        NumPy array (the same on every rank) is distributed with ``DistCSR.from_scipy(...,
        root=None)``. Symmetric (a :class:`DistCSR` is checked once).
    k : int
        Wanted eigenpairs; ``0 < k`` and ``5 k < n``.
    X : ndarray (n, k or block_size) or pgas.DistArray, optional
        Starting block (every rank passes the same array); default seeded Gaussian, identical
        whatever the number of ranks. A ``k``-column block is widened with random columns.
    B : like A, optional
        Symmetric positive definite mass matrix (default identity).
    M : None, "jacobi" or callable
        Preconditioner (symmetric positive definite, approximating the inverse of A near the wanted
        end of the spectrum): ``"jacobi"`` scales by ``1/|diag(A)|``, which helps at the low end
        of diagonally dominant matrices (with ``largest=True`` it is at best a scaling); a callable
        maps this rank's rows of a block (backend array) to an array of the same shape.
    tol : float, optional
        Relative residual tolerance (see the module notes); default :func:`default_tol`.
    maxiter : int, optional
        Default :func:`default_maxiter`.
    largest : bool
        Largest instead of smallest eigenvalues.
    backend : {"cpu", "gpu", "strict"} or Backend, optional
        Default: ``A.backend`` for a :class:`DistCSR`, else ``"cpu"``.
    seed : int
        Seed of the random starting block.
    verbosity : int
        ``>= 1``: one line per iteration on rank 0 (stdout).
    block_size : int, optional
        Work with a larger block than ``k`` (helps when the ``k``-th eigenvalue sits in a cluster).
    callback : callable, optional
        ``callback(iteration, eigenvalues, residual_norms)`` after every iteration, on every rank
        (the first ``k`` pairs in block order).

    Returns
    -------
    LobpcgResult

    Raises
    ------
    ValueError
        (hpcsuite's ``InputError`` where the check is collective) On every rank before iterating:
        ``k`` or ``block_size`` out of range, A or B not square or not symmetric, NaN/inf in ``X``,
        ``X`` or the preconditioner's output of the wrong shape, a zero diagonal with
        ``M="jacobi"``, B not positive definite.

    Warns
    -----
    UserWarning
        When ``maxiter`` is reached (or the iteration stagnates) before all ``k`` residuals are
        below ``tol``; the message lists them and the result has ``converged=False``.
    """
    opA = _as_operator(A, "A", None, backend or "cpu")
    team = opA.team
    be = get_backend(backend if backend is not None else getattr(getattr(opA, "backend", None), "name", "cpu"))
    n = opA.shape[0]
    m = _check_sizes(k, block_size, n)
    tol, maxiter = _check_scalars(tol, maxiter, n, m)
    opB = None if B is None else _as_operator(B, "B", team, be.name)
    if opB is not None and opB.shape != opA.shape:
        raise ValueError(f"B has shape {opB.shape} but A has shape {opA.shape}")
    for name, op in (("A", opA), ("B", opB)):
        if op is not None and getattr(op, "backend", be).name != be.name:
            raise ValueError(f"{name} lives on backend {op.backend.name!r} but the solver runs on {be.name!r}")
        if isinstance(op, DistCSR) and not op.is_symmetric():
            raise InputError(f"{name} is not symmetric; LOBPCG needs a symmetric matrix "
                             f"(use scipy.sparse.linalg.eigs for general matrices)")
    host, msg = _starting_block(X, opA, m, k, seed, be)
    X0 = be.asarray(host) if msg is None else None
    prec, pmsg = (None, None) if msg else _preconditioner(M, opA, be, X0)
    agree(team, raise_message, msg or pmsg)

    solver = _Solver(opA, opB, prec, be, team, m, k, bool(largest))
    try:
        solver.start(X0)
    except _NotPD as exc:
        raise InputError(str(exc)) from None
    return _iterate(solver, tol, maxiter, verbosity, callback, n)


def _iterate(s: _Solver, tol: float, maxiter: int, verbosity: int, callback, n: int) -> LobpcgResult:
    k = s.k
    history: list[np.ndarray] = []
    it, fresh, converged, stalled = 0, True, False, False
    while True:
        rel = s.residuals()
        if len(history) == it + 1:
            history[it] = rel[:k].copy()     # a re-check with fresh products replaces the estimate
        else:
            history.append(rel[:k].copy())
            _report(s, it, rel, tol, verbosity, callback)
        if np.all(rel[:k] <= tol):
            if fresh:
                converged = True
                break
            s.refresh()
            fresh = True
            continue
        if it >= maxiter:
            break
        if not s.step(np.flatnonzero(rel > tol)):
            stalled = True
            break
        it += 1
        fresh = False
    return _result(s, rel, it, converged, stalled, tol, maxiter, history, n)


def _report(s: _Solver, it: int, rel: np.ndarray, tol: float, verbosity: int, callback) -> None:
    k = s.k
    if callback is not None:
        callback(it, s.lam[:k].copy(), rel[:k].copy())
    if verbosity > 0 and s.team.rank == 0:
        done = int(np.sum(rel[:k] <= tol))
        sys.stdout.write(f"lobpcg: iteration {it}: {done}/{k} converged, max relative residual "
                         f"{np.max(rel[:k]):.3e}, {int(np.sum(rel > tol))} active\n")
        sys.stdout.flush()


def _result(s: _Solver, rel, it, converged, stalled, tol, maxiter, history, n) -> LobpcgResult:
    k = s.k
    order = np.argsort(s.lam[:k], kind="stable")
    vals, res = s.lam[:k][order], rel[:k][order]
    vectors = rows_to_distarray(s.cols(s.X, order), n, s.team, s.be)
    if not converged:
        why = "stagnated (no new search direction survived orthogonalisation)" if stalled else \
            f"reached maxiter = {maxiter}"
        warnings.warn(f"lobpcg did not converge: {why} after {it} iterations; relative residuals "
                      f"[{', '.join(f'{r:.2e}' for r in res)}] (tol {tol:.2e}) for eigenvalues "
                      f"[{', '.join(f'{v:.8g}' for v in vals)}]; raise maxiter, use a "
                      f"preconditioner or a larger block_size", UserWarning, stacklevel=4)
    return LobpcgResult(eigenvalues=vals, eigenvectors=vectors, residual_norms=res, iterations=it,
                        converged=bool(converged), residual_history=history, tol=tol,
                        theta_max=s.theta_max, matvecs=s.matvecs)

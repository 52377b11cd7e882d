"""Distributed Krylov solvers: :func:`cg`, :func:`minres` and restarted :func:`gmres`, with Jacobi,
Chebyshev-polynomial and user preconditioners.

Vectors are distributed by rows: every rank passes and gets back only *its* rows of ``b``, ``x0``
and ``x`` (1-D arrays of the backend: NumPy, CuPy or array_api_strict). One source serves all
backends: the vector updates go through the backend's array namespace ``xp`` and stay on the device;
only the dot products leave it, as one small array per reduction, summed over the ranks with one
``Allreduce`` (fused where the algorithm allows):

* CG: two ``Allreduce`` per iteration (``[r.r, r.z]`` together, then ``p.Ap``); the very first one
  carries ``b.b`` too.
* MINRES: two per iteration (``v.y`` for alpha, ``r.M^-1 r`` for beta). SciPy's stopping tests need
  ``||x_k||``; it travels in the next iteration's first reduction: the next product ``A v`` is made
  before iteration k's tests are decided (one unused product at the end, no extra reduction).
* GMRES: classical Gram-Schmidt with one reorthogonalisation (CGS2), two ``Allreduce`` per Arnoldi
  step (``[V^T w, w.w]`` for each pass; the new norm is ``||w'||^2 - ||h_2||^2``, recomputed with a
  third reduction only when that difference loses more than half its digits). SciPy's modified
  Gram-Schmidt would need ``j + 2`` reductions at step ``j``. Preconditioning is from the *right*
  (``A M y = b``, ``x = M y``), so the inner residual estimate is the true residual's norm in exact
  arithmetic and the stopping test is SciPy's documented one, ``||b - A x|| <= max(rtol ||b||, atol)``.

Operators: a :class:`~hpcsuite.solvers.DistCSR`, or any object with ``matvec(x)`` or ``A @ x`` that
returns this rank's rows of ``y = A x`` given this rank's rows of ``x`` (1-D, on the backend), called
collectively on every rank of the team, in the same order. Optional attributes, used when present:
``shape`` (``(n, n)``; checked square), ``team`` (default: the world), ``local_rows`` (checked against
``b``), ``diagonal()`` (this rank's diagonal entries: needed for ``M="jacobi"``) and ``backend``.

Results are those of SciPy (``x, info``: ``info = 0`` converged, ``> 0`` the iteration limit,
``< 0`` a breakdown); ``return_info=True`` returns a :class:`KrylovResult` instead, with the
residual history. Unpreconditioned CG, MINRES and GMRES make the same iterates as
``scipy.sparse.linalg`` (to rounding) and stop at the same iteration.

Examples
--------
With ``mpiexec -n 2``, each rank holding half of the rows::

    >>> A = DistCSR.from_generator(n, rows_fn)                # e.g. a 3-D Laplacian
    >>> b = np.ones(A.local_rows)                              # this rank's rows of b
    >>> x, info = cg(A, b, rtol=1e-8, M="jacobi")             # this rank's rows of x
    >>> res = gmres(A, b, M=Chebyshev(A, degree=4), return_info=True)
    >>> res.iterations, res.residual_norms[-1]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from ..accel import get_backend
from ..runtime import InputError, Team, agree

__all__ = ["cg", "minres", "gmres", "KrylovResult", "Jacobi", "Chebyshev", "estimate_bounds"]

_EPS = float(np.finfo(np.float64).eps)


@dataclass
class KrylovResult:
    """What the solvers return with ``return_info=True`` (the same on every rank except ``x``).

    Attributes
    ----------
    x : array
        This rank's rows of the solution, on the backend.
    info : int
        ``0`` converged; ``> 0`` not converged within ``maxiter`` (the value SciPy returns);
        ``< 0`` breakdown (``-1``: a zero or non-finite denominator).
    iterations : int
        Iterations made (GMRES: inner Arnoldi steps over all cycles).
    residual_norms : list of float
        Entry 0: the initial residual norm; then one per iteration. CG: ``||r_k||`` from the
        recurrence; MINRES: SciPy's ``phibar`` (the ``M^-1``-norm of the residual, ``||r_k||``
        without preconditioner); GMRES: the Arnoldi estimate of ``||b - A x_k||``.
    cycle_residuals : list of float
        GMRES only: the true ``||b - A x||`` after each restart cycle.
    atol : float
        The absolute tolerance used, ``max(atol, rtol * ||b||)``.
    matvecs : int
        Products with ``A`` made through the solver (with ``M="chebyshev"`` those of the polynomial
        and its eigenvalue estimate too; a user's own ``Chebyshev`` object counts apart).
    reductions : int
        Global sums made (each one ``Allreduce`` on more than one rank), the estimate included.
    method : str
    """

    x: Any
    info: int
    iterations: int
    residual_norms: list = field(default_factory=list)
    cycle_residuals: list = field(default_factory=list)
    atol: float = 0.0
    matvecs: int = 0
    reductions: int = 0
    method: str = ""

    @property
    def converged(self) -> bool:
        return self.info == 0


# ---------------------------------------------------------------------- operators and reductions
class _Op:
    """``A`` as a counted function on local rows, with its team and backend."""

    def __init__(self, A, name: str):
        if hasattr(A, "matvec"):
            self._f = A.matvec
        elif hasattr(A, "matmat"):
            self._f = A.matmat
        elif hasattr(type(A), "__matmul__"):
            self._f = A.__matmul__
        else:
            raise InputError(f"{name} must be a DistCSR or an object with matvec(x) or A @ x on this rank's "
                             f"rows of a vector; got {type(A).__name__}")
        shape = getattr(A, "shape", None)
        if shape is not None and (len(tuple(shape)) != 2 or shape[0] != shape[1]):
            raise InputError(f"{name} must be square, got shape {tuple(shape)}")
        self.n = None if shape is None else int(shape[0])
        team = getattr(A, "team", None)
        if team is not None and not isinstance(team, Team):
            raise InputError(f"{name}.team must be a hpcsuite Team, got {type(team).__name__}")
        self.team = team if team is not None else Team.world()
        self.local_rows = getattr(A, "local_rows", None)
        self.A = A
        self.count = 0

    def __call__(self, x):
        self.count += 1
        return self._f(x)


class _Reducer:
    """Sums of local dot products over the team: one device->host copy, one Allreduce."""

    def __init__(self, team: Team, be):
        self.team, self.be, self.xp = team, be, be.xp
        self.calls = 0

    def __call__(self, parts) -> np.ndarray:
        """``parts``: 0-d or 1-d device arrays (local partial sums); returns their global sums."""
        xp = self.xp
        if self.be.is_host:
            host = np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])
        else:
            host = np.array(self.be.to_host(xp.concat([xp.reshape(p, (-1,)) for p in parts])), dtype=np.float64)
        self.calls += 1
        if self.team.size > 1:
            self.team.Allreduce(MPI.IN_PLACE, host)
        return host


def _dot(a, b):
    return a @ b


def _axpy(y, alpha: float, x, tmp) -> None:
    """``y += alpha * x`` in place; on NumPy through the work buffer ``tmp`` (no temporary)."""
    if tmp is not None:
        np.multiply(x, alpha, out=tmp)
        y += tmp
    else:
        y += alpha * x


def _copy(a):
    """A fresh copy of a backend array (``a * 1.0``: one pass, on any array namespace)."""
    return a * 1.0


# ---------------------------------------------------------------------- preconditioners
class Jacobi:
    """Diagonal preconditioner ``z = r / d`` with ``d`` this rank's part of ``diag(A)``.

    Parameters
    ----------
    A : DistCSR or an operator with ``diagonal()``
    absolute : bool
        Use ``|diag(A)|`` (what :func:`minres` needs: a positive definite preconditioner).

    Local (construction and application).
    """

    def __init__(self, A, absolute: bool = False, backend=None):
        if not hasattr(A, "diagonal"):
            raise InputError("M='jacobi' needs A.diagonal() (this rank's diagonal entries); A has none")
        be = get_backend(backend if backend is not None else getattr(getattr(A, "backend", None), "name", "cpu"))
        d = be.asarray(A.diagonal())
        xp = be.xp
        if absolute:
            d = xp.abs(d)
        if bool(xp.any(d == 0.0)) or not bool(xp.all(xp.isfinite(d))):
            raise InputError("M='jacobi' needs a nonzero, finite diagonal of A")
        self.inv = 1.0 / d

    def __call__(self, r):
        return r * self.inv


def _hash_vector(r0: int, nloc: int, be):
    """Rows ``r0:r0+nloc`` of a fixed pseudo-random vector (the same for any number of ranks)."""
    i = np.arange(r0, r0 + nloc, dtype=np.float64)
    v = np.sin(i * 12.9898 + 78.233) * 43758.5453
    return be.asarray(v - np.floor(v) - 0.5)


def _row_offset(op: _Op, nloc: int) -> int:
    if hasattr(op.A, "row_start"):
        return int(op.A.row_start)
    off = op.team.comm.exscan(nloc) if op.team.size > 1 else 0
    return int(off or 0)


def estimate_bounds(A, steps: int = 10, backend=None, local_rows: int | None = None) -> tuple[float, float]:
    """Estimate the extreme eigenvalues of ``A`` with ``steps`` Arnoldi steps (Lanczos with full
    reorthogonalisation when A is symmetric). Collective.

    Returns ``(lmin, lmax)``: the smallest and largest real part of the Ritz values. For a
    symmetric matrix ``lmin >= lambda_min`` and ``lmax <= lambda_max`` (the Ritz values lie inside
    the spectrum); :class:`Chebyshev` widens ``lmax`` by 10 %. ``local_rows``: this rank's rows,
    needed only for an operator without ``local_rows`` or ``row_start``/``row_stop``.
    """
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise InputError(f"steps must be a positive integer, got {steps!r}")
    op = _Op(A, "A")
    be = get_backend(backend if backend is not None else getattr(getattr(A, "backend", None), "name", "cpu"))
    nloc = local_rows if local_rows is not None else op.local_rows
    if nloc is None and hasattr(A, "row_start") and hasattr(A, "row_stop"):
        nloc = int(A.row_stop - A.row_start)
    if nloc is None:
        raise InputError("estimate_bounds: A has no local_rows (or row_start/row_stop); pass local_rows=")
    return _estimate(op, nloc, int(steps), be, _Reducer(op.team, be))


def _estimate(op: _Op, nloc: int, steps: int, be, reduce: _Reducer) -> tuple[float, float]:
    xp = be.xp
    v = _hash_vector(_row_offset(op, nloc), nloc, be)
    nrm = math.sqrt(reduce([_dot(v, v)])[0])
    n = op.n if op.n is not None else steps
    steps = min(steps, n)
    V = be.zeros((steps + 1, nloc))
    V[0, :] = v / nrm
    H = np.zeros((steps + 1, steps))
    m = steps
    for j in range(steps):
        w = op(V[j, :])
        h, hn, h0 = _cgs2(V[:j + 1, :], w, reduce, xp, be)
        H[:j + 1, j], H[j + 1, j] = h, hn
        if hn <= 1e-12 * h0:
            m = j + 1
            break
        V[j + 1, :] = w / hn
    ritz = np.linalg.eigvals(H[:m, :m]).real
    return float(np.min(ritz)), float(np.max(ritz))


class Chebyshev:
    """Chebyshev polynomial preconditioner: ``z = p(A) r`` with ``p`` of degree ``degree`` the
    Chebyshev-iteration approximation of ``A^-1`` on the interval ``[lmin, lmax]`` (Saad, *Iterative
    Methods for Sparse Linear Systems*, Alg. 12.1, started from 0). ``degree`` products with ``A``
    per application. For a symmetric positive definite A whose spectrum ends at or below ``lmax``,
    ``p(A)`` is symmetric positive definite (usable with :func:`cg` and :func:`minres`); an
    ``lmin`` above the true smallest eigenvalue only weakens it. For GMRES on a nonsymmetric A the
    interval should cover the real parts of its spectrum.

    Parameters
    ----------
    A : operator (as for the solvers)
    degree : int
        Polynomial degree (products with ``A`` per application), >= 1.
    bounds : (lmin, lmax), optional
        Eigenvalue bounds, ``0 < lmin < lmax``. Default: :func:`estimate_bounds` with ``steps``
        steps, ``lmax`` widened by 10 % (the Ritz value lies below the true largest eigenvalue).
    steps : int
        Arnoldi/Lanczos steps of the estimate.

    Construction is collective when the bounds are estimated; every application is collective.
    """

    def __init__(self, A, degree: int = 4, bounds=None, steps: int = 10, backend=None,
                 local_rows: int | None = None):
        if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
            raise InputError(f"degree must be a positive integer, got {degree!r}")
        if bounds is not None:
            try:
                lo, hi = (float(t) for t in bounds)
            except (TypeError, ValueError):
                raise InputError(f"bounds must be a pair (lmin, lmax) of numbers, got {bounds!r}") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 < lo < hi):
                raise InputError(f"bounds must satisfy 0 < lmin < lmax (finite), got {bounds!r}")
        self.op = _Op(A, "A")
        self.degree = int(degree)
        if bounds is None:
            lo, hi = estimate_bounds(A, steps=steps, backend=backend, local_rows=local_rows)
            hi *= 1.1
            if not (0.0 < lo < hi):
                raise InputError(f"Chebyshev: the estimated spectrum [{lo:.3g}, {hi:.3g}] is not positive; "
                                 "A must be positive definite (or pass bounds=)")
        self.bounds = (lo, hi)

    def __call__(self, r):
        lo, hi = self.bounds
        theta, delta = 0.5 * (hi + lo), 0.5 * (hi - lo)
        sigma = theta / delta
        rho = 1.0 / sigma
        d = r / theta
        z = d
        for _ in range(self.degree):
            res = r - self.op(z)
            rho_new = 1.0 / (2.0 * sigma - rho)
            d = (rho_new * rho) * d + (2.0 * rho_new / delta) * res
            z = z + d
            rho = rho_new
        return z


# ---------------------------------------------------------------------- argument handling
@dataclass
class _Setup:
    op: _Op
    be: Any
    xp: Any
    team: Team
    reduce: _Reducer
    b: Any
    x: Any                 # a fresh copy (zeros when x0 is None)
    x0_given: bool
    prec: Callable | None
    maxiter: int | None
    rtol: float
    atol: float
    callback: Callable | None
    nloc: int


def _check_number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(value)) or float(value) < 0.0:
        raise InputError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _infer_backend(b, A, backend):
    if backend is not None:
        return get_backend(backend)
    be = getattr(A, "backend", None)
    if be is not None and hasattr(be, "xp"):
        return be
    mod = type(b).__module__
    if mod.startswith("cupy"):
        return get_backend("gpu")
    if mod.startswith("array_api_strict"):
        return get_backend("strict")
    return get_backend("cpu")


def _setup(name, A, b, x0, rtol, atol, maxiter, M, callback, backend, symmetric_prec=False) -> _Setup:
    """Validate everything before any communication: first what every rank can check alike (the
    scalars, the operator's type and shape), then the local pieces (b, x0, the diagonal) with one
    collective verdict (``runtime.agree``)."""
    rtol = _check_number(rtol, "rtol")
    atol = _check_number(atol, "atol")
    if maxiter is not None and (isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer))
                                or maxiter < 0):
        raise InputError(f"maxiter must be None or an integer >= 0, got {maxiter!r}")
    if callback is not None and not callable(callback):
        raise InputError(f"callback must be None or callable, got {type(callback).__name__}")
    if not (M is None or callable(M) or (isinstance(M, str) and M in ("jacobi", "chebyshev"))):
        raise InputError(f"M must be None, 'jacobi', 'chebyshev', a Jacobi/Chebyshev object or a callable on "
                         f"this rank's rows, got {M!r}")
    op = _Op(A, "A")
    be = _infer_backend(b, A, backend)
    if be.name not in ("cpu", "gpu", "strict"):
        raise InputError(f"backend must be 'cpu', 'gpu' or 'strict', got {be.name!r}")
    xp = be.xp

    def local():
        if getattr(b, "ndim", None) != 1:
            raise InputError(f"b must be a 1-D array of this rank's rows, got "
                             f"{getattr(b, 'shape', type(b).__name__)}")
        nloc = int(b.shape[0])
        if op.local_rows is not None and nloc != op.local_rows:
            raise InputError(f"b has {nloc} rows on rank {op.team.rank} but A has {op.local_rows} local rows "
                             f"(pass this rank's rows of b)")
        if op.n is not None and nloc > op.n:
            raise InputError(f"b has {nloc} rows but A has shape {(op.n, op.n)}")
        bd = be.asarray(b, dtype=xp.float64) if be.name != "cpu" else np.asarray(b, dtype=np.float64)
        if not bool(xp.all(xp.isfinite(bd))):
            raise InputError("b has NaN or inf entries")
        if x0 is None:
            x = be.zeros((nloc,))
        else:
            if getattr(x0, "shape", None) != (nloc,):
                raise InputError(f"x0 must have the shape of b, ({nloc},), got "
                                 f"{getattr(x0, 'shape', type(x0).__name__)}")
            x = _copy(be.asarray(x0, dtype=xp.float64)) if be.name != "cpu" else np.array(x0, dtype=np.float64)
            if not bool(xp.all(xp.isfinite(x))):
                raise InputError("x0 has NaN or inf entries")
        prec = None
        if M == "jacobi":
            prec = Jacobi(A, absolute=symmetric_prec, backend=be)
        elif M is not None and not isinstance(M, str):
            prec = M
        return bd, x, nloc, prec

    bd, x, nloc, prec = agree(op.team, local)
    if op.n is None:                              # a user operator without shape: sum the rows
        op.n = nloc if op.team.size == 1 else int(op.team.comm.allreduce(nloc))
    else:
        total = nloc if op.team.size == 1 else int(op.team.comm.allreduce(nloc))
        if total != op.n:
            raise InputError(f"b has {total} rows over all ranks but A has shape {(op.n, op.n)}")
    reduce = _Reducer(op.team, be)
    if M == "chebyshev":
        prec = _chebyshev_for(op, nloc, be, reduce)
    return _Setup(op=op, be=be, xp=xp, team=op.team, reduce=reduce, b=bd, x=x,
                  x0_given=x0 is not None, prec=prec, maxiter=None if maxiter is None else int(maxiter),
                  rtol=rtol, atol=atol, callback=callback, nloc=nloc)


def _chebyshev_for(op: _Op, nloc: int, be, reduce: _Reducer) -> Chebyshev:
    """``Chebyshev(A, degree=4)`` on the solver's own counted operator (for ``M="chebyshev"``)."""
    c = Chebyshev.__new__(Chebyshev)
    lo, hi = _estimate(op, nloc, 10, be, reduce)
    hi *= 1.1
    if not (0.0 < lo < hi):
        raise InputError(f"M='chebyshev': the estimated spectrum [{lo:.3g}, {hi:.3g}] is not positive; A must "
                         "be positive definite (or pass Chebyshev(A, bounds=...))")
    c.op, c.degree, c.bounds = op, 4, (lo, hi)
    return c


def _finish(s: _Setup, x, info, it, hist, atol, name, return_info, cycles=None):
    if return_info:
        return KrylovResult(x=x, info=int(info), iterations=it, residual_norms=hist,
                            cycle_residuals=cycles or [], atol=atol, matvecs=s.op.count,
                            reductions=s.reduce.calls, method=name)
    return x, int(info)


# ---------------------------------------------------------------------- CG
def cg(A, b, x0=None, *, rtol: float = 1e-5, atol: float = 0.0, maxiter: int | None = None, M=None,
       callback: Callable | None = None, return_info: bool = False, backend=None):
    """Conjugate gradients for a symmetric positive definite ``A``. Collective.

    Parameters
    ----------
    A : DistCSR or operator
        See the module notes (this rank's rows of ``A x`` from this rank's rows of ``x``).
    b : array (local_rows,)
        This rank's rows of the right-hand side (NumPy, CuPy or array_api_strict).
    x0 : array (local_rows,), optional
        This rank's rows of the starting guess (default zero).
    rtol, atol : float
        Converged when ``||r|| < max(rtol * ||b||, atol)`` (SciPy's test).
    maxiter : int, optional
        Default ``10 n``.
    M : None, "jacobi", "chebyshev", Jacobi, Chebyshev or callable
        Symmetric positive definite preconditioner: a callable maps this rank's rows of ``r`` to
        this rank's rows of ``z ~ A^-1 r`` (collective if it communicates). ``"chebyshev"``:
        ``Chebyshev(A, degree=4)`` with estimated bounds.
    callback : callable, optional
        ``callback(xk)`` after each iteration with this rank's rows, on every rank.
    return_info : bool
        Return a :class:`KrylovResult` instead of ``(x, info)``.
    backend : {"cpu", "gpu", "strict"}, optional
        Default: ``A.backend``, else from the type of ``b``.

    Returns
    -------
    x, info : this rank's rows of the solution; 0, ``maxiter`` or ``-1`` (breakdown: ``p.Ap`` zero
        or not finite). Or a :class:`KrylovResult` with ``return_info=True``.

    Raises
    ------
    InputError
        (a ``ValueError``) On every rank, before iterating: rtol/atol negative or not finite,
        maxiter not an integer >= 0, A not square or without a product, b or x0 of the wrong shape
        or not finite, a bad M.
    """
    s = _setup("cg", A, b, x0, rtol, atol, maxiter, M, callback, backend)
    xp, op, prec, reduce = s.xp, s.op, s.prec, s.reduce
    x, b = s.x, s.b
    r = b - op(x) if s.x0_given else _copy(b)
    maxiter = 10 * op.n if s.maxiter is None else s.maxiter
    hist, it, info, atol_ = [], 0, None, 0.0
    rho_prev, p = 1.0, None
    tmp = np.empty_like(b) if s.be.is_host else None
    while True:
        z = r if prec is None else prec(r)
        parts = [_dot(r, r)] + ([] if prec is None else [_dot(r, z)]) + ([_dot(b, b)] if it == 0 else [])
        red = reduce(parts)
        rnorm = math.sqrt(red[0])
        rho = float(red[0] if prec is None else red[1])
        if it == 0:
            bnorm = math.sqrt(red[-1])
            atol_ = max(s.atol, s.rtol * bnorm)
            if bnorm == 0.0:
                return _finish(s, xp.zeros_like(b), 0, 0, [0.0], atol_, "cg", return_info)
        hist.append(rnorm)
        if rnorm < atol_:
            info = 0
            break
        if it >= maxiter:
            info = maxiter
            break
        if it == 0:
            p = _copy(z)
        else:
            p *= rho / rho_prev
            p += z
        q = op(p)
        pq = float(reduce([_dot(p, q)])[0])
        if pq == 0.0 or not math.isfinite(pq) or not math.isfinite(rho):
            info = -1
            break
        alpha = rho / pq
        _axpy(x, alpha, p, tmp)
        _axpy(r, -alpha, q, tmp)
        rho_prev = rho
        it += 1
        if s.callback is not None:
            s.callback(x)
    return _finish(s, x, info, it, hist, atol_, "cg", return_info)


# ---------------------------------------------------------------------- MINRES
def minres(A, b, x0=None, *, rtol: float = 1e-5, shift: float = 0.0, maxiter: int | None = None, M=None,
           callback: Callable | None = None, return_info: bool = False, backend=None):
    """MINRES (Paige & Saunders) for a symmetric, possibly indefinite ``A - shift I``. Collective.

    The iteration and its stopping tests are SciPy's (``scipy.sparse.linalg.minres``): stop when
    ``||r|| / (||A|| ||x||) <= rtol`` or ``||A r|| / (||A|| ||r||) <= rtol`` (with ``||A||``
    estimated from the Lanczos coefficients), or on the conditions SciPy lists (eps accuracy,
    ``cond(A) >= 0.1/eps``). ``M`` must be symmetric positive definite (``"jacobi"`` uses
    ``|diag(A)|``). Parameters and results as :func:`cg` (default ``maxiter = 5 n``); ``callback(xk)``
    after each iteration.

    Raises
    ------
    InputError
        As :func:`cg`; during the iteration (on every rank alike) when ``M`` turns out indefinite or
        ``A`` not symmetric (``r.M^-1 r < 0``).
    """
    shift = _check_shift(shift)                 # before _setup's collective checks
    s = _setup("minres", A, b, x0, rtol, 0.0, maxiter, M, callback, backend, symmetric_prec=True)
    xp, op, reduce = s.xp, s.op, s.reduce
    psolve = s.prec if s.prec is not None else (lambda v: v)
    x, b = s.x, s.b
    rtol = s.rtol
    maxiter = 5 * op.n if s.maxiter is None else s.maxiter
    r1 = b - op(x) if s.x0_given else _copy(b)
    y = psolve(r1)
    red = reduce([_dot(r1, y), _dot(b, b)])
    beta1, bnorm = float(red[0]), math.sqrt(red[1])
    if beta1 < 0:
        raise InputError("M is not positive definite (r.M^-1 r < 0 for the initial residual)")
    if beta1 == 0 or bnorm == 0:
        return _finish(s, x if beta1 == 0 and bnorm != 0 else xp.zeros_like(b), 0, 0, [0.0], 0.0, "minres",
                       return_info)
    beta1 = math.sqrt(beta1)
    istop, itn = 0, 0
    oldb, beta, dbar, epsln, phibar, rhs1, rhs2 = 0.0, beta1, 0.0, 0.0, beta1, beta1, 0.0
    tnorm2, gmax, gmin, cs, sn = 0.0, 0.0, float(np.finfo(np.float64).max), -1.0, 0.0
    w, w2 = xp.zeros_like(b), xp.zeros_like(b)
    r2 = r1
    hist = [beta1]
    pending = None                  # the values for the stopping tests of iteration itn
    while True:
        if pending is not None and itn >= maxiter:
            ynorm = math.sqrt(reduce([_dot(x, x)])[0])
            istop = _minres_tests(pending, ynorm, itn, maxiter, beta1, rtol, istop)
            if s.callback is not None:
                s.callback(x)
            break
        v = y * (1.0 / beta)
        y = op(v)
        if shift != 0.0:
            y = y - shift * v
        if itn >= 1:
            y = y - (beta / oldb) * r1
        red = reduce([_dot(v, y)] + ([_dot(x, x)] if pending is not None else []))
        if pending is not None:           # iteration itn's tests, with ||x_itn|| from this reduction
            istop = _minres_tests(pending, math.sqrt(red[1]), itn, maxiter, beta1, rtol, istop)
            if s.callback is not None:
                s.callback(x)
            if istop != 0:
                break
        itn += 1
        alfa = float(red[0])
        y = y - (alfa / beta) * r2
        r1, r2 = r2, y
        y = psolve(r2)
        oldb = beta
        beta = float(reduce([_dot(r2, y)])[0])
        if beta < 0:
            raise InputError("A is not symmetric or M not positive definite (r.M^-1 r < 0 in MINRES)")
        beta = math.sqrt(beta)
        tnorm2 += alfa ** 2 + oldb ** 2 + beta ** 2
        if itn == 1 and beta / beta1 <= 10 * _EPS:
            istop = -1
        oldeps = epsln
        delta = cs * dbar + sn * alfa
        gbar = sn * dbar - cs * alfa
        epsln = sn * beta
        dbar = -cs * beta
        root = math.hypot(gbar, dbar)
        gamma = max(math.hypot(gbar, beta), _EPS)
        cs, sn = gbar / gamma, beta / gamma
        phi = cs * phibar
        phibar = sn * phibar
        w1, w2 = w2, w
        w = (v - oldeps * w1 - delta * w2) * (1.0 / gamma)
        x = x + phi * w
        gmax, gmin = max(gmax, gamma), min(gmin, gamma)
        z = rhs1 / gamma
        rhs1, rhs2 = rhs2 - delta * z, -epsln * z
        hist.append(phibar)
        pending = (math.sqrt(tnorm2), phibar, root, gmax / gmin)
    info = maxiter if istop == 6 else 0
    return _finish(s, x, info, itn, hist, rtol * bnorm, "minres", return_info)


def _check_shift(shift) -> float:
    if isinstance(shift, bool) or not isinstance(shift, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(shift)):
        raise InputError(f"shift must be a finite number, got {shift!r}")
    return float(shift)


def _minres_tests(pending, ynorm, itn, maxiter, beta1, rtol, istop) -> int:
    """SciPy's MINRES stopping tests for iteration ``itn`` (same order, same precedence)."""
    Anorm, rnorm, root, Acond = pending
    if istop != 0:
        return istop
    epsx = Anorm * ynorm * _EPS
    test1 = math.inf if (ynorm == 0 or Anorm == 0) else rnorm / (Anorm * ynorm)
    test2 = math.inf if Anorm == 0 else root / Anorm
    t1, t2 = 1 + test1, 1 + test2
    if t2 <= 1:
        istop = 2
    if t1 <= 1:
        istop = 1
    if itn >= maxiter:
        istop = 6
    if Acond >= 0.1 / _EPS:
        istop = 4
    if epsx >= beta1:
        istop = 3
    if test2 <= rtol:
        istop = 2
    if test1 <= rtol:
        istop = 1
    return istop


# ---------------------------------------------------------------------- GMRES
def _cgs2(V, w, reduce: _Reducer, xp, be):
    """Orthogonalise ``w`` (in place) against the orthonormal rows of ``V``: classical Gram-Schmidt
    twice, one Allreduce per pass. Returns ``(h, ||w_new||, ||w_old||)``."""
    red = reduce([xp.matmul(V, w), _dot(w, w)])
    h1, h0 = red[:-1], math.sqrt(max(red[-1], 0.0))
    w -= xp.matmul(be.asarray(h1) if not be.is_host else h1, V)
    red = reduce([xp.matmul(V, w), _dot(w, w)])
    h2, ww = red[:-1], float(red[-1])
    w -= xp.matmul(be.asarray(h2) if not be.is_host else h2, V)
    hn2 = ww - float(h2 @ h2)
    if hn2 < 0.5 * ww:                      # cancellation: measure it
        hn2 = float(reduce([_dot(w, w)])[0])
    return h1 + h2, math.sqrt(max(hn2, 0.0)), h0


def gmres(A, b, x0=None, *, rtol: float = 1e-5, atol: float = 0.0, restart: int | None = None,
          maxiter: int | None = None, M=None, callback: Callable | None = None, callback_type: str | None = None,
          return_info: bool = False, backend=None):
    """Restarted GMRES(``restart``) with right preconditioning. Collective.

    Parameters
    ----------
    A, b, x0, rtol, atol, M, return_info, backend
        As :func:`cg`; ``M`` need not be symmetric (but must be a fixed linear map: ``x = M y`` is
        formed once per cycle). Converged when ``||b - A x|| <= max(rtol ||b||, atol)``, checked
        with a fresh product after each cycle (SciPy's test).
    restart : int, optional
        Arnoldi steps per cycle, default ``min(20, n)``.
    maxiter : int, optional
        Restart cycles (as SciPy), default ``10 n``; ``info = maxiter`` when not converged.
    callback : callable, optional
        ``callback_type="pr_norm"`` (the default, SciPy's legacy meaning): ``callback(rk)`` after
        each Arnoldi step with the residual estimate over ``||b||``; ``"x"``: ``callback(xk)``
        after each cycle with this rank's rows.

    Notes
    -----
    Gram-Schmidt: classical with one reorthogonalisation (CGS2), two Allreduce per Arnoldi step
    (see the module notes). Breakdown (``||w|| <= eps ||A v||``, the exact solution is in the
    space) ends the cycle; the solution is then checked as after any cycle.
    """
    if callback_type not in (None, "x", "pr_norm"):
        raise InputError(f"callback_type must be None, 'x' or 'pr_norm', got {callback_type!r}")
    if restart is not None and (isinstance(restart, bool) or not isinstance(restart, (int, np.integer))
                                or restart < 1):
        raise InputError(f"restart must be None or a positive integer, got {restart!r}")
    s = _setup("gmres", A, b, x0, rtol, atol, maxiter, M, callback, backend)
    xp, op, be, reduce = s.xp, s.op, s.be, s.reduce
    prec = s.prec
    x, b = s.x, s.b
    n = op.n
    maxiter = 10 * n if s.maxiter is None else s.maxiter
    restart = min(20 if restart is None else int(restart), n)
    ctype = callback_type or "pr_norm"
    r = b - op(x) if s.x0_given else _copy(b)
    red = reduce([_dot(r, r), _dot(b, b)])
    rnorm, bnorm = math.sqrt(red[0]), math.sqrt(red[1])
    atol_ = max(s.atol, s.rtol * bnorm)
    if bnorm == 0.0:
        return _finish(s, xp.zeros_like(b), 0, 0, [0.0], atol_, "gmres", return_info)
    hist, cycles = [rnorm], []
    if rnorm < atol_:
        return _finish(s, x, 0, 0, hist, atol_, "gmres", return_info, cycles)
    from scipy.linalg import get_lapack_funcs
    lartg = get_lapack_funcs("lartg", dtype=np.float64)
    V = be.zeros((restart + 1, s.nloc))
    h = np.zeros((restart, restart + 1))
    givens = np.zeros((restart, 2))
    factor = 1.0
    ptol = bnorm * min(factor, atol_ / bnorm)
    presid, inner = 0.0, 0
    for _cycle in range(maxiter):
        V[0, :] = r * (1.0 / rnorm)
        S = np.zeros(restart + 1)
        S[0] = rnorm
        h[:] = 0.0
        breakdown = False
        for col in range(restart):
            vj = V[col, :]
            w = op(vj if prec is None else prec(vj))
            hc, hn, h0 = _cgs2(V[:col + 1, :], w, reduce, xp, be)
            h[col, :col + 1] = hc
            h[col, col + 1] = hn
            if hn <= _EPS * h0:
                h[col, col + 1] = 0.0
                breakdown = True
            else:
                V[col + 1, :] = w * (1.0 / hn)
            for k in range(col):
                c, sn = givens[k]
                n0, n1 = h[col, k], h[col, k + 1]
                h[col, k], h[col, k + 1] = c * n0 + sn * n1, -sn * n0 + c * n1
            c, sn, mag = lartg(h[col, col], h[col, col + 1])
            givens[col] = c, sn
            h[col, col], h[col, col + 1] = mag, 0.0
            tmp = -sn * S[col]
            S[col], S[col + 1] = c * S[col], tmp
            presid = abs(tmp)
            inner += 1
            hist.append(presid)
            if callback is not None and ctype == "pr_norm":
                callback(presid / bnorm)
            if presid <= ptol or breakdown:
                break
        if h[col, col] == 0:
            S[col] = 0
        y = np.zeros(col + 1)
        y[:] = S[:col + 1]
        for k in range(col, 0, -1):
            if y[k] != 0:
                y[k] /= h[k, k]
                y[:k] -= y[k] * h[k, :k]
        if y[0] != 0:
            y[0] /= h[0, 0]
        dx = xp.matmul(y if be.is_host else be.asarray(y), V[:col + 1, :])
        x += dx if prec is None else prec(dx)
        r = b - op(x)
        rnorm = math.sqrt(reduce([_dot(r, r)])[0])
        cycles.append(rnorm)
        if callback is not None and ctype == "x":
            callback(x)
        if rnorm <= atol_ or breakdown:
            break
        if presid <= ptol:
            factor = max(_EPS, 0.25 * factor)
        else:
            factor = min(1.0, 1.5 * factor)
        ptol = presid * min(factor, atol_ / rnorm)
        if rnorm == 0.0:
            break
    info = 0 if rnorm <= atol_ else maxiter
    return _finish(s, x, info, inner, hist, atol_, "gmres", return_info, cycles)

"""Krylov solvers against independent references: the iterates of scipy.sparse.linalg's cg, minres
and gmres on the same matrices (1 rank), manufactured solutions x* (b = A x*) on Dirichlet
Laplacians and a convection-diffusion matrix at 1-4 ranks, with each preconditioner cutting the
iteration count; a matrix-free operator; the CuPy stand-in path against the NumPy path; bad input.

Iteration counts measured at 1 rank, rtol 1e-10 (the tests assert ratios with margin, since
rounding moves counts a little with the rank count):
  CG, scaled 3-D Laplacian S L S (8^3, cond ~ 1e6): 920 -> 37 with Jacobi; 3-D Laplacian (10^3):
  46 -> 13 with Chebyshev of degree 4. MINRES, scaled: 672 -> 35 with Jacobi. GMRES(20), 2-D
  upwind convection-diffusion (30^2): 203 -> 20 with Chebyshev, -> 1/22/25/27 at 1/2/3/4 ranks with
  a user block-Jacobi (LU of each rank's diagonal block); row-scaled (20^2): 301 -> 153 with Jacobi.
"""
import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl
from scipy.sparse.linalg import LaplacianNd

from hpcsuite.runtime import InputError, gpu_status
from hpcsuite.solvers import Chebyshev, DistCSR, KrylovResult, cg, estimate_bounds, gmres, minres


def laplacian(shape):
    return (-LaplacianNd(shape, boundary_conditions="dirichlet").tosparse()).astype(np.float64).tocsr()


def spread(n):
    """A fixed scaling in [1, 100] per row (a pseudo-random hash of the row index)."""
    v = np.sin(np.arange(n) * 12.9898 + 78.233) * 43758.5453
    return 10.0 ** (2.0 * (v - np.floor(v)))


def scaled_laplacian(shape):
    """S L S with S = diag(spread): SPD, badly scaled (what Jacobi repairs)."""
    L = laplacian(shape)
    S = sp.diags(spread(L.shape[0]))
    return (S @ L @ S).tocsr()


def convection_diffusion(m, peclet=50.0):
    """Upwind 2-D convection-diffusion on an m x m grid (nonsymmetric, positive real spectrum)."""
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    C = sp.diags([-1.0, 1.0], [-1, 0], shape=(m, m))
    I = sp.eye(m)
    h = 1.0 / (m + 1)
    return (sp.kron(I, T) + sp.kron(T, I) + peclet * h * (sp.kron(I, C) + sp.kron(C, I))).tocsr()


def manufactured(M, A):
    """x* = cos(0.01 i), b = M x*; this rank's rows of both."""
    xs = np.cos(0.01 * np.arange(M.shape[0]))
    b = M @ xs
    return xs[A.row_start:A.row_stop], b[A.row_start:A.row_stop]


def rel_err(team, x, xs):
    from mpi4py import MPI
    num = team.comm.allreduce(float(np.sum((x - xs) ** 2)), op=MPI.SUM)
    den = team.comm.allreduce(float(np.sum(xs ** 2)), op=MPI.SUM)
    return np.sqrt(num / den)


# ---------------------------------------------------------------------- the iterates of SciPy (1 rank)
CASES = {
    "cg": (cg, spl.cg, lambda: laplacian((12, 12))),                                   # SPD
    "minres": (minres, spl.minres, lambda: (laplacian((12, 12)) - 2.0 * sp.eye(144)).tocsr()),   # indefinite
    "gmres": (gmres, spl.gmres, lambda: (laplacian((12, 12)) + sp.diags([0.3], [1], shape=(144, 144))).tocsr()),
}


@pytest.mark.parametrize("method", list(CASES))
def test_same_iterates_as_scipy(method):
    """Unpreconditioned: the same iterate after every iteration (GMRES: every restart cycle, and the
    same number of inner steps) and the same stopping iteration. Measured largest relative
    difference over all iterates: CG 0, MINRES 2.6e-15, GMRES 5.5e-16; asserted 1e-11."""
    ours, theirs, make = CASES[method]
    M = make()
    A = DistCSR.from_scipy(M, root=None, team=None)
    b = np.random.default_rng(3).standard_normal(M.shape[0])
    kw = {"callback_type": "x"} if method == "gmres" else {}
    xs, ys = [], []
    x1, i1 = ours(A, b, rtol=1e-8, callback=lambda x: xs.append(np.array(x)), **kw)
    x2, i2 = theirs(M, b, rtol=1e-8, callback=lambda x: ys.append(np.array(x)), **kw)
    assert (i1, len(xs)) == (i2, len(ys)) and i1 == 0 and len(xs) > 1
    for a, c in zip(xs, ys):
        assert np.max(np.abs(a - c)) <= 1e-11 * np.max(np.abs(c))
    if method == "gmres":       # inner steps: SciPy's pr_norm callback counts them
        p1, p2 = [], []
        gmres(A, b, rtol=1e-8, callback=p1.append, callback_type="pr_norm")
        spl.gmres(M, b, rtol=1e-8, callback=p2.append, callback_type="pr_norm")
        assert len(p1) == len(p2)
        np.testing.assert_allclose(p1, p2, rtol=1e-9)
    res = ours(A, b, rtol=1e-8, return_info=True)
    assert isinstance(res, KrylovResult) and res.converged and len(res.residual_norms) == res.iterations + 1
    # global sums: CG two per iteration plus the start; MINRES the same plus the one made ahead with
    # ||x_k|| for the last stopping test; GMRES two per Arnoldi step (CGS2; a rare third when the
    # norm update cancels) plus the start and one per cycle (the true residual)
    if method == "gmres":
        assert 2 * res.iterations + 1 + len(res.cycle_residuals) <= res.reductions <= \
            3 * res.iterations + 1 + len(res.cycle_residuals)
    else:
        assert res.reductions == 2 * res.iterations + (1 if method == "cg" else 2)


def test_bad_input_one_clear_error():
    A = DistCSR.from_scipy(laplacian((6,)), root=None)
    b = np.ones(6)
    for call, word in [(lambda: cg(A, b, rtol=-1.0), "rtol"), (lambda: cg(A, b, atol=float("nan")), "atol"),
                       (lambda: cg(A, np.ones(5)), "b has 5 rows"), (lambda: minres(A, b, x0=np.ones(3)), "x0"),
                       (lambda: gmres(A, b, restart=0), "restart"), (lambda: cg(A, b, maxiter=2.5), "maxiter"),
                       (lambda: cg(A, b, M="ilu"), "M must be"), (lambda: cg(np.ones((3, 4)), np.ones(3)), "square"),
                       (lambda: gmres(A, b, callback_type="y"), "callback_type"),
                       (lambda: Chebyshev(A, bounds=(2.0, 1.0)), "bounds"), (lambda: cg(A, b * np.nan), "NaN"),
                       (lambda: minres(A, b, shift=float("inf")), "shift")]:
        with pytest.raises(InputError, match=word):
            call()


@pytest.mark.parametrize("method", ["cg", "minres", "gmres"])
def test_strict_array_api_backend(method):
    """The whole iteration on array_api_strict arrays on a non-CPU device (a NumPy-only call or an
    implicit host conversion raises), with an operator written in the array API. Measured errors
    below 2e-10 at rtol 1e-10 (CG/GMRES on a tridiagonal matrix with cond ~ 10)."""
    from hpcsuite.accel import get_backend
    be = get_backend("strict")
    n = 60
    T = sp.diags([-1.0, 2.5, -1.2], [-1, 0, 1], shape=(n, n)).toarray()
    M = {"cg": (T + T.T) / 2, "minres": (T + T.T) / 2 - 0.3 * np.eye(n), "gmres": T}[method]
    f = {"cg": cg, "minres": minres, "gmres": gmres}[method]
    Md = be.asarray(M)

    class Dense:
        shape = (n, n)

        def matvec(self, x):
            return be.xp.matmul(Md, x)

        def diagonal(self):
            return be.asarray(np.diag(M).copy())

    xs = np.cos(0.1 * np.arange(n))
    for prec in ((None, "jacobi") if method == "minres" else (None, "jacobi", "chebyshev")):
        r = f(Dense(), be.asarray(M @ xs), rtol=1e-10, M=prec, return_info=True)
        assert r.info == 0 and np.max(np.abs(be.to_host(r.x) - xs)) < 1e-8


# ---------------------------------------------------------------------- exact solutions at 1-4 ranks
def gen(M):
    return lambda r0, r1: M[r0:r1]


@pytest.mark.mpi
def test_cg_laplacians_and_preconditioners(team):
    S = scaled_laplacian((8, 8, 8))
    A = DistCSR.from_generator(S.shape[0], gen(S), team=team, symmetric=True)
    xs, b = manufactured(S, A)
    jac = cg(A, b, rtol=1e-10, M="jacobi", return_info=True)
    assert jac.info == 0 and rel_err(team, jac.x, xs) < 1e-7     # measured 2.3e-9 (cond(S L S) ~ 1e6)
    # without it, 5x as many iterations do not suffice (measured: 37 with Jacobi, 920 without)
    plain = cg(A, b, rtol=1e-10, maxiter=5 * jac.iterations, return_info=True)
    assert plain.info == 5 * jac.iterations and plain.residual_norms[-1] > 100 * plain.atol
    L = laplacian((10, 10, 10))
    A = DistCSR.from_scipy(L, team=team, root=None)
    xs, b = manufactured(L, A)
    plain = cg(A, b, rtol=1e-10, return_info=True)
    cheb = cg(A, b, rtol=1e-10, M=Chebyshev(A, degree=4), return_info=True)
    lo, hi = estimate_bounds(A)          # 10 Lanczos steps: Ritz values inside the spectrum
    exact = 12 * np.sin(np.pi / 22) ** 2, 12 * np.cos(np.pi / 22) ** 2
    assert exact[0] <= lo < hi <= exact[1] and hi > 0.95 * exact[1]
    for r in (plain, cheb):      # measured errors below 1e-10 (cond ~ 50)
        assert r.info == 0 and rel_err(team, r.x, xs) < 1e-8
    assert cheb.iterations * 3 < plain.iterations            # measured 13 vs 46 (12^3: 15 vs 51)


@pytest.mark.mpi
def test_minres_indefinite_and_jacobi(team):
    L = laplacian((10, 10, 10))
    M = (L - 1.0 * sp.eye(L.shape[0])).tocsr()                 # eigenvalues in [-0.76, 10.76]
    A = DistCSR.from_scipy(M, team=team, root=None)
    xs, b = manufactured(M, A)
    r = minres(A, b, rtol=1e-10, return_info=True)
    assert r.info == 0 and rel_err(team, r.x, xs) < 1e-7     # measured 4.8e-9 in 76 iterations
    S = scaled_laplacian((8, 8, 8))
    A = DistCSR.from_generator(S.shape[0], gen(S), team=team)
    xs, b = manufactured(S, A)
    jac = minres(A, b, rtol=1e-10, M="jacobi", return_info=True)
    assert jac.info == 0 and rel_err(team, jac.x, xs) < 1e-6  # measured 2e-8 (the test is ||r||/(||A|| ||x||))
    plain = minres(A, b, rtol=1e-10, maxiter=5 * jac.iterations, return_info=True)
    assert plain.info == 5 * jac.iterations                  # measured: 35 with Jacobi, 672 without


@pytest.mark.mpi
def test_gmres_convection_diffusion_and_preconditioners(team):
    C = convection_diffusion(30)
    A = DistCSR.from_generator(C.shape[0], gen(C), team=team, symmetric=False)
    xs, b = manufactured(C, A)
    plain = gmres(A, b, rtol=1e-10, return_info=True)
    cheb = gmres(A, b, rtol=1e-10, M="chebyshev", return_info=True)
    r0, r1 = A.row_start, A.row_stop
    lu = spl.splu(C[r0:r1, r0:r1].tocsc()) if r1 > r0 else None            # local block-Jacobi
    user = gmres(A, b, rtol=1e-10, M=lambda r: lu.solve(r) if lu is not None else r, return_info=True)
    for r in (plain, cheb, user):       # measured errors below 2e-10
        assert r.info == 0 and rel_err(team, r.x, xs) < 1e-7
        assert r.cycle_residuals[-1] <= r.atol
    assert cheb.iterations * 5 < plain.iterations            # measured 20 vs 203
    assert user.iterations * 5 < plain.iterations            # measured 1 / 22 / 25 / 27 at 1-4 ranks
    D = (sp.diags(spread(400)) @ convection_diffusion(20)).tocsr()      # badly scaled rows
    A = DistCSR.from_scipy(D, team=team, root=None)
    xs, b = manufactured(D, A)
    jac = gmres(A, b, rtol=1e-10, M="jacobi", return_info=True)
    assert jac.info == 0 and rel_err(team, jac.x, xs) < 1e-7
    # without it, 1.5x as many Arnoldi steps do not suffice (measured: 153 with Jacobi, 301 without)
    cycles = -(-3 * jac.iterations // 40)
    plain = gmres(A, b, rtol=1e-10, maxiter=cycles, return_info=True)
    assert plain.info == cycles and plain.cycle_residuals[-1] > plain.atol


@pytest.mark.mpi
def test_bad_input_on_one_rank_raises_on_every_rank(team):
    """b of the wrong length on the last rank only: every rank raises the same InputError, before
    iterating (no rank is left waiting in a reduction), and the next solve works."""
    A = DistCSR.from_scipy(laplacian((20,)), team=team, root=None)
    last = team.rank == team.size - 1
    for f in (cg, minres, gmres):
        with pytest.raises(InputError, match=f"b has {A.local_rows + 1 if last else ''}"):
            f(A, np.ones(A.local_rows + (1 if last else 0)))
    assert cg(A, np.ones(A.local_rows))[1] == 0


@pytest.mark.mpi
def test_matrix_free_operator(team):
    """A user operator: the 1-D Dirichlet Laplacian as a stencil with one neighbour row each way."""
    from mpi4py import MPI

    from hpcsuite.runtime import block_range
    n = 60
    r0, r1 = block_range(n, team.size, team.rank)
    up = team.rank - 1 if team.rank > 0 else MPI.PROC_NULL
    down = team.rank + 1 if team.rank < team.size - 1 else MPI.PROC_NULL

    class Stencil:
        shape, local_rows = (n, n), r1 - r0

        def __init__(self):
            self.team = team

        def matvec(self, x):
            lo, hi = np.zeros(1), np.zeros(1)
            team.comm.Sendrecv(np.ascontiguousarray(x[:1]), up, 7, hi, down, 7)
            team.comm.Sendrecv(np.ascontiguousarray(x[-1:]), down, 8, lo, up, 8)
            ext = np.concatenate([lo, x, hi])
            return 2.0 * x - ext[:-2] - ext[2:]

        def diagonal(self):
            return np.full(r1 - r0, 2.0)

    xs_all = np.sin(np.linspace(0.0, 3.0, n))
    b_all = laplacian((n,)) @ xs_all
    r = cg(Stencil(), b_all[r0:r1], rtol=1e-12, M="jacobi", return_info=True)
    assert r.info == 0 and rel_err(team, r.x, xs_all[r0:r1]) < 1e-8        # measured 1e-15
    assert r.iterations <= n + 10           # exact arithmetic: <= n; measured 60 (n distinct eigenvalues)


# ---------------------------------------------------------------------- the CuPy stand-in
gpu_ok, gpu_why = gpu_status()


@pytest.mark.mpi
@pytest.mark.skipif(not gpu_ok, reason=f"no GPU (run with PYTHONPATH=tests/fakegpu): {gpu_why}")
def test_gpu_path_equals_numpy_path(team):
    """The same solver source on CuPy arrays (a DistCSR on backend 'gpu'): the same iterations and
    the same solution to rounding (identical on the stand-in, whose arithmetic is NumPy's)."""
    import cupy
    C = convection_diffusion(16)
    L = laplacian((8, 8, 8))
    for M, f, Ms in [(None, cg, L), ("jacobi", minres, L), ("chebyshev", cg, L), ("jacobi", gmres, C),
                     ("chebyshev", gmres, C)]:
        Ah = DistCSR.from_scipy(Ms, team=team, root=None)
        Ad = DistCSR.from_scipy(Ms, team=team, root=None, backend="gpu")
        _, b = manufactured(Ms, Ah)
        rh = f(Ah, b, rtol=1e-10, M=M, return_info=True)
        rd = f(Ad, cupy.asarray(b), rtol=1e-10, M=M, return_info=True)
        assert isinstance(rd.x, cupy.ndarray)
        assert (rd.info, rd.iterations) == (rh.info, rh.iterations)
        np.testing.assert_allclose(cupy.asnumpy(rd.x), rh.x, rtol=1e-12, atol=1e-12)


def test_gpu_path_on_the_cupy_stand_in():
    """Runs the test above under ``PYTHONPATH=tests/fakegpu`` (1 rank) where no GPU is present."""
    if gpu_ok:
        pytest.skip("a CuPy is importable here: the test above ran directly")
    from helpers import ROOT, run_cmd
    p = run_cmd([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi",
                 f"{__file__}::test_gpu_path_equals_numpy_path"], timeout=120,
                env={"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "fakegpu"),
                                                    os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]

"""LOBPCG against independent references: the closed-form spectrum of scipy's LaplacianNd (with
degenerate clusters on cubic grids), scipy.sparse.linalg.eigsh, and dense scipy.linalg.eigh for a
generalized problem; the warning when it does not converge; the input checks; and a portability run
of the whole iteration on array_api_strict arrays (where any NumPy-only call raises)."""
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import LaplacianNd, eigsh

from hpcsuite.runtime import InputError
from hpcsuite.solvers import DistCSR, LobpcgResult, RowOperator, lobpcg
from hpcsuite.solvers.lobpcg import _random_rows, default_maxiter, default_tol


def laplacian(shape, bc="dirichlet"):
    """``(-LaplacianNd as CSR, all exact eigenvalues of it, ascending)``."""
    L = LaplacianNd(shape, boundary_conditions=bc)
    return (-L.tosparse()).astype(np.float64).tocsr(), np.sort(-L.eigenvalues())


def spd_matrix(n, seed):
    """Random sparse couplings on a spread diagonal whose top 5 entries stand apart."""
    rng = np.random.default_rng(seed)
    R = sp.random(n, n, 4.0 / n, random_state=rng)
    d = np.linspace(1.0, 50.0, n)
    d[-5:] += 2.0 * np.arange(1, 6)
    return (R + R.T + sp.diags(d)).tocsr()


def gathered(res: LobpcgResult) -> np.ndarray:
    V = res.eigenvectors.to_numpy()
    res.eigenvectors.free()
    return V


def check_pairs(M, V, res: LobpcgResult, B=None):
    """Independent check of the returned pairs with SciPy products: B-orthonormality and the
    documented criterion ||A v - lambda B v|| <= tol * theta_max * ||B v||."""
    BV = V if B is None else B @ V
    assert np.allclose(V.T @ BV, np.eye(V.shape[1]), atol=1e-9)
    r = np.linalg.norm(M @ V - BV * res.eigenvalues, axis=0)
    assert np.all(r <= 1.01 * res.tol * res.theta_max * np.linalg.norm(BV, axis=0)), (r, res.theta_max)
    assert np.allclose(r / (res.theta_max * np.linalg.norm(BV, axis=0)), res.residual_norms, rtol=1e-3, atol=1e-14)


# ---------------------------------------------------------------------- serial
def test_random_start_does_not_depend_on_the_row_split():
    whole = _random_rows(0, 10_000, 3, seed=5, chunk=4096)
    cuts = ((0, 17), (17, 4100), (4100, 10_000))
    pieces = np.vstack([_random_rows(a, b, 3, seed=5, chunk=4096) for a, b in cuts])
    assert np.array_equal(whole, pieces)


def test_documented_defaults():
    assert default_tol(100) == pytest.approx(100 * np.sqrt(np.finfo(float).eps))
    assert default_tol(10**7) == 1e-5
    assert default_maxiter(4) == 200 and default_maxiter(30) == 600


# ---------------------------------------------------------------------- Laplacian: exact spectra
@pytest.mark.mpi
@pytest.mark.parametrize("shape,k,M,largest", [
    ((10, 10, 10), 6, None, False),        # k = 6 splits the second 3-fold cluster
    ((10, 10, 10), 10, "jacobi", False),   # clusters 1 + 3 + 3 + 3
    ((10, 10, 10), 8, "jacobi", True),     # largest, splitting a cluster from the top
    ((8, 8, 8), 7, None, True),
    ((6, 6, 6), 9, None, False),
])
def test_cubic_laplacian_against_exact_eigenvalues(team, shape, k, M, largest):
    A_s, exact = laplacian(shape)
    want = exact[-k:] if largest else exact[:k]
    A = DistCSR.from_scipy(A_s if team.rank == 0 else None, team=team, symmetric=True)
    res = lobpcg(A, k, M=M, largest=largest, tol=1e-7)
    assert res.converged and res.iterations < default_maxiter(k)
    assert np.all(np.diff(res.eigenvalues) >= 0)
    assert np.max(np.abs(res.eigenvalues - want) / want) < 1e-8
    assert np.all(res.residual_norms <= 1e-7)
    assert len(res.residual_history) == res.iterations + 1
    check_pairs(A_s, gathered(res), res)


@pytest.mark.mpi
@pytest.mark.parametrize("shape,bc", [((12, 9), "neumann"), ((8, 8), "periodic")])
def test_zero_eigenvalue_boundary_conditions(team, shape, bc):
    """Neumann and periodic grids have eigenvalue 0 (and periodic ones 2- and 4-fold clusters)."""
    A_s, exact = laplacian(shape, bc)
    A = DistCSR.from_generator(A_s.shape[0], lambda a, b: A_s[a:b], team=team, symmetric_half=True)
    res = lobpcg(A, 6, tol=1e-8)
    assert res.converged
    assert np.allclose(res.eigenvalues, exact[:6], rtol=1e-8, atol=1e-10)
    check_pairs(A_s, gathered(res), res)


# ---------------------------------------------------------------------- other references
@pytest.mark.mpi
@pytest.mark.parametrize("largest", [False, True])
def test_random_sparse_spd_against_eigsh(team, largest):
    n, k = 300, 5
    M_s = spd_matrix(n, seed=42)
    ref = np.sort(eigsh(M_s, k, which="LA" if largest else "SA", tol=1e-14)[0])
    A = DistCSR.from_scipy(M_s if team.rank == 0 else None, team=team)
    # Jacobi (1/|diag|) accelerates the low end only
    res = lobpcg(A, k, M=None if largest else "jacobi", block_size=8 if largest else None,
                 largest=largest, tol=1e-9)
    assert res.converged
    assert np.allclose(res.eigenvalues, ref, rtol=1e-10, atol=0)
    check_pairs(M_s, gathered(res), res)


@pytest.mark.mpi
def test_generalized_problem_with_diagonal_spd_b(team):
    A_s, _ = laplacian((9, 7))
    n, k = A_s.shape[0], 4
    B_s = sp.diags(np.random.default_rng(3).uniform(1.0, 3.0, n)).tocsr()
    ref = sla.eigh(A_s.toarray(), B_s.toarray(), eigvals_only=True)[:k]
    A = DistCSR.from_scipy(A_s, team=team, root=None)
    B = DistCSR.from_scipy(B_s, team=team, root=None, symmetric=True)
    res = lobpcg(A, k, B=B, M="jacobi", tol=1e-9)
    assert res.converged
    assert np.allclose(res.eigenvalues, ref, rtol=1e-10, atol=0)
    check_pairs(A_s, gathered(res), res, B=B_s)


@pytest.mark.mpi
def test_generalized_problem_implicit_updates(team):
    """A and B with many nonzeros per row: A X and B X are updated implicitly (not recomputed each
    step) and recomputed only to confirm convergence."""
    from hpcsuite.solvers.lobpcg import _cheap
    n, k = 150, 3
    rng = np.random.default_rng(11)
    R = sp.random(n, n, 0.3, random_state=rng)
    A_s = (R + R.T + sp.diags(np.linspace(1.0, 20.0, n))).tocsr()
    Q = sp.random(n, n, 0.3, random_state=rng)
    B_s = (0.02 * (Q + Q.T) + sp.diags(np.full(n, 4.0))).tocsr()
    ref = sla.eigh(A_s.toarray(), B_s.toarray(), eigvals_only=True)
    A = DistCSR.from_scipy(A_s if team.rank == 0 else None, team=team)
    B = DistCSR.from_scipy(B_s if team.rank == 0 else None, team=team)
    assert not _cheap(A, k) and not _cheap(B, k)
    for largest in (False, True):
        res = lobpcg(A, k, B=B, largest=largest, tol=1e-9, block_size=5)
        assert res.converged
        assert np.allclose(res.eigenvalues, ref[-k:] if largest else ref[:k], rtol=1e-10, atol=0)
        check_pairs(A_s, gathered(res), res, B=B_s)


@pytest.mark.mpi
def test_half_storage_block_size_and_starting_blocks(team):
    """Upper-triangle storage gives the same answer; a larger block; a given start (NumPy or
    DistArray); exact eigenvectors as the start converge at once."""
    from hpcsuite import pgas
    A_s, exact = laplacian((7, 7, 7))
    full = DistCSR.from_scipy(A_s, team=team, root=None)
    half = DistCSR.from_scipy(A_s, team=team, root=None, symmetric_half=True)
    a = lobpcg(full, 4, tol=1e-8)
    b = lobpcg(half, 4, tol=1e-8)
    assert a.converged and b.converged and abs(a.iterations - b.iterations) <= 2
    assert np.allclose(a.eigenvalues, b.eigenvalues, rtol=1e-13, atol=0)
    c = lobpcg(half, 4, tol=1e-8, block_size=7)              # 7 = 1 + 3 + 3 closes the cluster
    assert c.converged and c.iterations <= a.iterations
    assert np.allclose(c.eigenvalues, exact[:4], rtol=1e-9, atol=0)
    V = gathered(a)
    d = lobpcg(full, 4, X=V, tol=1e-8)                        # converged vectors: (almost) no work
    assert d.converged and d.iterations <= 3
    X0 = np.random.default_rng(8).standard_normal((A_s.shape[0], 4))
    D = pgas.from_numpy(X0 if team.rank == 0 else None, dist=pgas.CYCLIC, team=team)
    with pytest.warns(UserWarning, match="did not converge"):     # same start, same arithmetic
        e, f = lobpcg(full, 4, X=D, maxiter=5), lobpcg(full, 4, X=X0, maxiter=5)
    assert np.array_equal(e.eigenvalues, f.eigenvalues)
    assert np.array_equal(e.residual_norms, f.residual_norms)
    for r in (b, c, d, e, f):
        r.eigenvectors.free()
    D.free()


@pytest.mark.mpi
def test_hard_diagonal_cases(team):
    """Exact preconditioner on diag(1..n) (the Rayleigh-Ritz basis becomes linearly dependent) and
    eigenvalues spread over 8 decades with Jacobi."""
    n, k = 400, 5
    for d in (np.arange(1.0, n + 1), np.logspace(-8, 0, n)):
        A = DistCSR.from_scipy(sp.diags(d).tocsr(), team=team, root=None)
        res = lobpcg(A, k, M="jacobi", tol=1e-12)
        assert res.converged
        assert np.allclose(res.eigenvalues, d[:k], rtol=1e-8, atol=0)
        res.eigenvectors.free()


# ---------------------------------------------------------------------- failure paths
@pytest.mark.mpi
def test_not_converged_warns_and_says_so(team):
    A_s, exact = laplacian((10, 10, 10))
    A = DistCSR.from_scipy(A_s, team=team, root=None)
    seen = []
    with pytest.warns(UserWarning, match=r"did not converge: reached maxiter = 3 after 3 iterations; "
                                         r"relative residuals \[\d\.\d\de-\d\d"):
        res = lobpcg(A, 4, maxiter=3, tol=1e-10, callback=lambda it, lam, r: seen.append(it))
    assert not res.converged and res.iterations == 3
    assert seen == [0, 1, 2, 3] and len(res.residual_history) == 4
    assert np.all(res.residual_norms > 0) and np.max(res.residual_norms) > 1e-10
    res.eigenvectors.free()


@pytest.mark.mpi
def test_bad_inputs_raise_before_iterating(team):
    A_s, _ = laplacian((5, 6))
    n = A_s.shape[0]
    A = DistCSR.from_scipy(A_s, team=team, root=None)
    good = np.ones((n, 2))
    cases = [
        (dict(k=0), "k must be a positive integer"),
        (dict(k=2.0), "k must be a positive integer"),
        (dict(k=6), "5k < n; for so large a part of the spectrum use a dense solver"),
        (dict(k=2, block_size=1), "block_size must be an integer >= k"),
        (dict(k=2, block_size=6), "5 \\* block_size < n"),
        (dict(k=2, tol=0.0), "tol must be a number in \\(0, 1\\)"),
        (dict(k=2, maxiter=-1), "maxiter must be a non-negative integer"),
        (dict(k=2, X=np.ones((n, 3))), "X must be the whole"),
        (dict(k=2, X=np.ones((n - 1, 2))), "X must be the whole"),
        (dict(k=2, X=np.where(np.eye(n, 2) > 0, np.nan, 1.0)), "X has NaN or inf"),
        (dict(k=2, M="ilu"), "M must be None, 'jacobi' or a callable"),
        (dict(k=2, M=lambda R: R[:, :1]), "must return an array of the shape it is given"),
        (dict(k=2, X=np.hstack([good[:, :1], good[:, :1]])), "linearly dependent"),
        (dict(k=2, B=-sp.eye(n, format="csr")), "B is not positive definite"),
        (dict(k=2, B=sp.eye(n + 1, format="csr")), "B has shape"),
    ]
    for kw, msg in cases:
        k = kw.pop("k")
        with pytest.raises(ValueError, match=msg):
            lobpcg(A, k, **kw)
    general = DistCSR.from_scipy(sp.random(n, n, 0.2, random_state=1, format="csr") + sp.eye(n), team=team,
                                 root=None)
    with pytest.raises(InputError, match="A is not symmetric; LOBPCG needs a symmetric matrix"):
        lobpcg(general, 2)
    zero_diag = DistCSR.from_scipy((A_s - sp.diags(A_s.diagonal())).tocsr(), team=team, root=None)
    with pytest.raises(InputError, match="nonzero, finite diagonal"):
        lobpcg(zero_diag, 2, M="jacobi")
    with pytest.raises(ValueError, match="must be a DistCSR, a RowOperator"):
        lobpcg("matrix", 2)

    # a preconditioner that misbehaves on one rank only: every rank raises the same error
    def odd(R):
        return R[:0] if team.rank == team.size - 1 else R
    with pytest.raises(InputError, match="must return an array of the shape"):
        lobpcg(A, 2, M=odd)
    assert lobpcg(A, 2, tol=1e-6).converged                 # and everything still works


# ---------------------------------------------------------------------- portability
@pytest.mark.mpi
@pytest.mark.parametrize("M", [None, "jacobi", "callable"])
def test_strict_array_api_backend_runs_the_iteration(team, M):
    """The whole iteration on array_api_strict arrays on a non-CPU device: a NumPy-only call or an
    implicit host conversion would raise. The operator is a tridiagonal stencil written with the
    array API whose neighbour rows travel through the host (one row each way); apart from that,
    only the starting block, the diagonal and the result cross the host boundary in n-sized pieces."""
    from mpi4py import MPI

    from hpcsuite.accel import get_backend
    be = get_backend("strict")
    xp = be.xp
    n, off = 400, 0.3
    main = np.concatenate([[1.0, 2.0, 3.0], np.linspace(6.0, 30.0, n - 3)])
    op = RowOperator(n, lambda X: X, team=team)
    r0, r1 = op.row_start, op.row_stop
    d = be.asarray(main[r0:r1].reshape(-1, 1))
    up = team.rank - 1 if team.rank > 0 else MPI.PROC_NULL
    down = team.rank + 1 if team.rank < team.size - 1 else MPI.PROC_NULL

    def matmat(X):
        k = X.shape[1]
        above, below = np.zeros((1, k)), np.zeros((1, k))
        team.comm.Sendrecv(be.to_host(X[:1, :]), up, 1, below, down, 1)
        team.comm.Sendrecv(be.to_host(X[-1:, :]), down, 2, above, up, 2)
        ext = xp.concat([be.asarray(above), X, be.asarray(below)], axis=0)
        return d * X + off * (ext[:-2, :] + ext[2:, :])

    op._matmat = matmat
    op._diagonal = lambda: be.asarray(main[r0:r1])
    prec = {"callable": (lambda R: R / d), "jacobi": "jacobi", None: None}[M]
    with be.data_region() as copies:
        res = lobpcg(op, 3, M=prec, tol=1e-9, backend="strict")
    sizes = [nbytes for _, nbytes in copies.log]
    T = np.diag(main) + off * (np.eye(n, k=1) + np.eye(n, k=-1))
    assert res.converged
    assert np.allclose(res.eigenvalues, sla.eigh(T, eigvals_only=True)[:3], rtol=1e-12, atol=0)
    V = gathered(res)
    assert np.allclose(T @ V, V * res.eigenvalues, atol=1e-7)
    big = [s for s in sizes if s >= 8 * (r1 - r0)]
    # the starting block, the diagonal (Jacobi) and the final vectors; nothing n-sized per iteration
    assert len(big) <= (3 if M == "jacobi" else 2), (len(big), res.iterations)
    assert len(sizes) > 3 * res.iterations                   # the small per-iteration copies were seen

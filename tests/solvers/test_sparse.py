"""DistCSR against SciPy: SpMM on random sparse matrices (uneven rows, empty rows, ranks without
rows), all three constructors, symmetric half storage against full storage, DistArray conversion,
and the input checks (the same error on every rank, before anything is distributed)."""
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from hpcsuite.runtime import InputError
from hpcsuite.solvers import DistCSR
from hpcsuite.solvers.sparse import block_owners, _sym_kernel


def random_matrix(n, density=0.15, seed=0, symmetric=False, empty_rows=()):
    """A random sparse matrix with some rows (and, if symmetric, the matching columns) empty."""
    rng = np.random.default_rng(seed)
    M = sp.random(n, n, density, random_state=rng, format="lil")
    M.setdiag(rng.uniform(1, 2, n))
    M = M.tocsr()
    if symmetric:
        M = (M + M.T).tocsr()
    keep = np.ones(n)
    keep[list(empty_rows)] = 0
    M = sp.diags(keep) @ M
    if symmetric:
        M = M @ sp.diags(keep)
    M = M.tocsr()
    M.eliminate_zeros()
    return M


def local(A, Y):
    return Y[A.row_start:A.row_stop]


# ---------------------------------------------------------------------- serial
def test_block_owners_match_block_range():
    from hpcsuite.runtime import block_range
    for n in (1, 3, 7, 10, 64):
        for p in (1, 2, 3, 4, 9):
            own = block_owners(np.arange(n), n, p)
            ref = np.concatenate([np.full(b - a, r) for r in range(p) for a, b in [block_range(n, p, r)]])
            assert np.array_equal(own, ref), (n, p)


def test_fused_symmetric_kernel_equals_two_scipy_passes():
    kernel = _sym_kernel()
    assert kernel is not None
    U = sp.triu(random_matrix(40, 0.2, seed=3, symmetric=True)).tocsr()
    X = np.random.default_rng(0).standard_normal((40, 3))
    Y = np.zeros_like(X)
    kernel(U.indptr, U.indices, U.data, X, Y)
    full = U + sp.triu(U, 1).T
    assert np.allclose(Y, full @ X, rtol=1e-14, atol=1e-14)


# ---------------------------------------------------------------------- MPI
@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3, 7, 41])
def test_spmm_equals_scipy_all_constructors(team, n):
    """n < ranks leaves ranks without rows; row 0 and a middle row are empty."""
    M = random_matrix(n, 0.2, seed=n, empty_rows={0, n // 2} if n > 2 else ())
    X = np.random.default_rng(1).standard_normal((n, 4))
    ref = M @ X
    built = [DistCSR.from_scipy(M if team.rank == 0 else None, team=team),
             DistCSR.from_scipy(M, team=team, root=None),
             DistCSR.from_generator(n, lambda a, b: M[a:b], team=team)]
    for A in built:
        assert A.shape == (n, n) and A.nnz == M.nnz
        assert A.row_stop - A.row_start == A.local_rows
        Y = A @ local(A, X)
        assert Y.shape == (A.local_rows, 4)
        assert np.allclose(Y, local(A, ref), rtol=1e-13, atol=1e-13)
        y = A.matmat(local(A, X[:, 1]))                      # a single vector stays 1-D
        assert y.shape == (A.local_rows,) and np.allclose(y, local(A, ref[:, 1]), rtol=1e-13, atol=1e-13)
        assert np.array_equal(A.diagonal(), local(A, M.diagonal()))
        assert abs(A.to_scipy(root=None) - M).max() == 0 if n else True


@pytest.mark.mpi
def test_repeated_products_and_several_widths(team):
    """The exchange plan is reused: products with different k, in any order, stay right."""
    n = 53
    M = random_matrix(n, 0.1, seed=7)
    A = DistCSR.from_scipy(M if team.rank == 0 else None, team=team)
    rng = np.random.default_rng(2)
    for k in (1, 5, 2, 8, 1):
        X = rng.standard_normal((n, k))
        assert np.allclose(A @ local(A, X), local(A, M @ X), rtol=1e-13, atol=1e-13)
    assert set(A.neighbours) <= set(range(team.size)) - {team.rank}
    cols = M[A.row_start:A.row_stop].indices
    assert A.ghost_count == np.unique(cols[(cols < A.row_start) | (cols >= A.row_stop)]).size


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 5, 60])
def test_symmetric_half_equals_full_storage(team, n):
    M = random_matrix(n, 0.2, seed=11 + n, symmetric=True, empty_rows={1})
    X = np.random.default_rng(3).standard_normal((n, 3))
    full = DistCSR.from_scipy(M if team.rank == 0 else None, team=team, symmetric=True)
    half = DistCSR.from_scipy(M if team.rank == 0 else None, team=team, symmetric_half=True)
    gen = DistCSR.from_generator(n, lambda a, b: M[a:b], team=team, symmetric_half=True)
    assert half.symmetric_half and half.nnz == full.nnz == M.nnz
    assert half.nnz_stored == sp.triu(M).nnz
    ref = local(full, M @ X)
    for A in (half, gen):
        Y = A @ local(A, X)
        assert np.allclose(Y, full @ local(full, X), rtol=1e-13, atol=1e-13)
        assert np.allclose(Y, ref, rtol=1e-13, atol=1e-13)
        assert np.array_equal(A.diagonal(), local(A, M.diagonal()))
        assert abs(A.to_scipy(root=None) - M).max() == 0


@pytest.mark.mpi
def test_from_mtx_reads_symmetric_files(team, shared_tmp):
    M = random_matrix(30, 0.2, seed=5, symmetric=True)
    path = shared_tmp / "m.mtx"
    if team.rank == 0:
        scipy.io.mmwrite(str(path), M, symmetry="symmetric")
    team.barrier()
    for half in (False, True):
        A = DistCSR.from_mtx(path, team=team, symmetric_half=half)
        X = np.random.default_rng(4).standard_normal((30, 2))
        assert np.allclose(A @ local(A, X), local(A, M @ X), rtol=1e-12, atol=1e-12)
        assert A.is_symmetric()


@pytest.mark.mpi
def test_distarray_round_trip(team):
    from hpcsuite import pgas
    n = 23
    M = random_matrix(n, 0.2, seed=9)
    A = DistCSR.from_scipy(M, team=team, root=None)
    X = np.random.default_rng(5).standard_normal((n, 3))
    D = A.to_distarray(local(A, X))
    assert D.shape == (n, 3) and D.dist == (pgas.BLOCKED, pgas.NONE)
    assert np.allclose(D.to_numpy(), X)
    E = A @ D                                           # DistArray in, DistArray out
    assert np.allclose(E.to_numpy(), M @ X, rtol=1e-13, atol=1e-13)
    C = pgas.from_numpy(X if team.rank == 0 else None, dist=pgas.CYCLIC, team=team)
    assert np.allclose(A.local_block(C), local(A, X))   # redistributed to row blocks
    v = A.to_distarray(local(A, X[:, 0]))
    assert v.shape == (n,) and np.allclose(v.to_numpy(), X[:, 0])
    for a in (D, E, C, v):
        a.free()


@pytest.mark.mpi
def test_is_symmetric_detects_one_asymmetric_pair_on_remote_rows(team):
    n = 40
    M = random_matrix(n, 0.1, seed=13, symmetric=True).tolil()
    assert DistCSR.from_scipy(M.tocsr(), team=team, root=None).is_symmetric()
    M[0, n - 1] = 5.0                                   # rows 0 and n-1 live on different ranks
    M[n - 1, 0] = 5.0 + 1e-6
    M = M.tocsr()
    assert not DistCSR.from_generator(n, lambda a, b: M[a:b], team=team).is_symmetric()
    with pytest.raises(ValueError, match=r"not symmetric: A\[(0, 39|39, 0)\]"):
        DistCSR.from_generator(n, lambda a, b: M[a:b], team=team, symmetric_half=True)
    with pytest.raises(ValueError, match="not symmetric"):
        DistCSR.from_scipy(M if team.rank == 0 else None, team=team, symmetric=True)


@pytest.mark.mpi
def test_bad_inputs_raise_the_same_error_on_every_rank(team, shared_tmp):
    ok = random_matrix(12, 0.3, seed=1, symmetric=True)
    cases = {
        "must be square": sp.random(5, 6, 0.5, format="csr"),
        "complex": sp.eye(5, dtype=complex, format="csr"),
        "NaN or inf": sp.diags([1.0, np.nan, 2.0]).tocsr(),
        "must be a SciPy sparse matrix or a NumPy array": [[1, 2], [3, 4]],
    }
    for msg, M in cases.items():
        with pytest.raises(ValueError, match=msg):          # only rank 0's matrix is looked at
            DistCSR.from_scipy(M if team.rank == 0 else None, team=team)
    with pytest.raises(InputError, match="no such file"):
        DistCSR.from_mtx(shared_tmp / "absent.mtx", team=team)
    with pytest.raises(InputError, match="DistCSR supports the backends"):
        DistCSR.from_scipy(ok, team=team, backend="strict")
    with pytest.raises(InputError, match="symmetric=False"):
        DistCSR.from_scipy(ok, team=team, symmetric_half=True, symmetric=False)
    # a generator that fails on one rank only: every rank raises, naming that rank's rows
    last = team.size - 1

    def rows(a, b):
        if team.rank == last:
            return sp.csr_matrix((b - a, 11))
        return ok[a:b]
    with pytest.raises(InputError, match=r"returned shape \(\d+, 11\), expected"):
        DistCSR.from_generator(12, rows, team=team)

    def nan_rows(a, b):
        r = ok[a:b].toarray()
        if a == 0:
            r[0, 0] = np.inf
        return r
    with pytest.raises(InputError, match=r"NaN or inf entries \(the first at row 0, column 0"):
        DistCSR.from_generator(12, nan_rows, team=team)
    A = DistCSR.from_scipy(ok, team=team, root=None)
    with pytest.raises(ValueError, match="must have this rank's"):
        A @ np.ones((A.local_rows + 1, 2))                  # checked before any message is sent
    A @ np.ones((A.local_rows, 2))                          # and the plan still works afterwards


@pytest.mark.mpi
def test_sub_team(team):
    """A matrix on a sub-team (the even ranks) works while the others do something else."""
    sub = team.split(team.rank % 2)
    M = random_matrix(17, 0.2, seed=21, symmetric=True)
    A = DistCSR.from_scipy(M if sub.rank == 0 else None, team=sub, symmetric_half=True)
    X = np.random.default_rng(6).standard_normal((17, 2))
    assert np.allclose(A @ local(A, X), local(A, M @ X), rtol=1e-13, atol=1e-13)
    sub.free()

"""The sparse matrix and LOBPCG on the GPU backend (CuPy, cupyx.scipy.sparse): the same answers as
SciPy and the exact Laplacian spectrum, and the iteration keeps its vectors on the device (the
only n-sized host copies are the start, the diagonal and the result; ghost rows are staged through
the host only when there are neighbours). Skipped cleanly where no GPU is usable; run by
``bench/gpu_check.sh`` on a GPU machine."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import LaplacianNd

from hpcsuite.runtime import gpu_status
from hpcsuite.solvers import DistCSR, lobpcg

ok, why = gpu_status()
pytestmark = pytest.mark.skipif(not ok, reason=f"no GPU: {why}")


def _symmetric(n, seed):
    rng = np.random.default_rng(seed)
    R = sp.random(n, n, 6.0 / n, random_state=rng)
    return (R + R.T + sp.diags(np.linspace(1.0, 40.0, n))).tocsr()


@pytest.mark.mpi
@pytest.mark.parametrize("half", [False, True], ids=["full", "half"])
def test_gpu_spmm_equals_scipy(team, half):
    import cupy
    n = 97
    M = _symmetric(n, seed=5)
    A = DistCSR.from_scipy(M, team=team, root=None, symmetric=True, symmetric_half=half, backend="gpu")
    X = np.random.default_rng(1).standard_normal((n, 5))
    Y = A @ cupy.asarray(X[A.row_start:A.row_stop])
    assert isinstance(Y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(Y), (M @ X)[A.row_start:A.row_stop], rtol=1e-12, atol=1e-12)


@pytest.mark.mpi
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_gpu_lobpcg_matches_exact_laplacian_and_stays_on_device(team, M):
    L = LaplacianNd((10, 10, 10), boundary_conditions="dirichlet")
    A_s, exact = (-L.tosparse()).astype(np.float64).tocsr(), np.sort(-L.eigenvalues())
    k = 6
    A = DistCSR.from_scipy(A_s, team=team, root=None, symmetric=True, backend="gpu")
    be = A.backend
    with be.data_region() as copies:
        res = lobpcg(A, k, M=M, tol=1e-7)
    sizes = [nbytes for _, nbytes in copies.log]
    assert res.converged
    assert np.max(np.abs(res.eigenvalues - exact[:k]) / exact[:k]) < 1e-8
    V = res.eigenvectors.to_numpy()
    res.eigenvectors.free()
    assert np.allclose(A_s @ V, V * res.eigenvalues, atol=1e-5)
    # the starting block, the diagonal (Jacobi) and the result: nothing n-sized per iteration. With
    # neighbours, ghost rows are staged through the host in every product (no CUDA-aware MPI
    # assumed): only transfers larger than any staging can be told apart by size.
    staged_rows = A.ghost_count + A._plan.send_idx.size
    limit = 8 * max(A.local_rows, 3 * k * staged_rows)
    big = [s for s in sizes if s >= limit]
    assert len(big) <= (3 if M == "jacobi" else 2), (len(big), res.iterations)

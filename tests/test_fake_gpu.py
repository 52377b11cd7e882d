"""Data residency of the GPU code paths, checked on the CuPy stand-in (tests/fakegpu), which counts
every host <-> device copy. Run with ``PYTHONPATH=tests/fakegpu`` (scripts/run_tests.sh does, in its
stand-in stage); skipped otherwise, and on a real GPU (whose copies nothing here can count)."""
import numpy as np
import pytest

try:
    import cupy
    from cupy import _core as fake
    FAKE = hasattr(fake, "transfers")
except ImportError:
    FAKE = False

pytestmark = pytest.mark.skipif(not FAKE, reason="needs the CuPy stand-in: PYTHONPATH=tests/fakegpu")


def _moved_during(fn):
    fake.transfers.clear()
    fn()
    return list(fake.transfers)


def test_the_stand_in_refuses_what_cupy_refuses():
    """Otherwise the checks below (and the GPU tests run on it) would prove nothing."""
    x = cupy.arange(6.0)
    for implicit in (np.asarray, lambda a: np.array(a), lambda a: a + np.ones(6), lambda a: cupy.add(a, np.ones(6))):
        with pytest.raises(TypeError):
            implicit(x)
    from mpi4py import MPI
    with pytest.raises(TypeError):
        MPI.COMM_SELF.Allreduce(MPI.IN_PLACE, x)
    assert isinstance(x.sum(), cupy.ndarray) and isinstance(x[0], cupy.ndarray)   # 0-d, not scalars
    moved = _moved_during(lambda: (float(x.sum()), x.get(), cupy.asarray(np.ones(3))))
    assert moved == [("to_host", 8), ("to_host", 48), ("to_device", 24)]


def test_les_step_keeps_every_field_on_the_device():
    """A BOMEX-like step with every physics term (one rank: halos are device copies) sends only the
    few scalars of the time-step control to the host, and nothing back."""
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team
    m = bomex_like((16, 16, 16), Team.world(), device="gpu")
    m.step()
    moved = _moved_during(m.step)
    m.free()
    assert all(d == "to_host" and n <= 8 for d, n in moved), moved
    assert len(moved) <= 8, moved


def test_stencil_solver_and_lobpcg_copy_only_scalars_and_small_matrices_per_step():
    from scipy.sparse.linalg import LaplacianNd

    from hpcsuite.solvers import DistCSR, StencilSolver, heat_coeffs, lobpcg
    n = 16
    s = StencilSolver((n, n, n), "7", heat_coeffs(1.0, 1e-4, (1 / n,) * 3), depth=2, backend="gpu")
    u0 = np.random.default_rng(1).random((n, n, n))
    moved = _moved_during(lambda: s.run(u0, 8).free())
    big = [b for _, b in moved if b >= 8 * n * n]
    assert len(big) <= 2, moved          # the start field in, the result out (gathered)

    L = LaplacianNd((8, 8, 8))
    A = DistCSR.from_scipy((-L.tosparse()).astype(float).tocsr(), root=None, symmetric=True, backend="gpu")
    res = None

    def solve():
        nonlocal res
        res = lobpcg(A, 4, tol=1e-6)
    moved = _moved_during(solve)
    res.eigenvectors.free()
    assert res.converged
    per_iteration = [b for _, b in moved if b >= 8 * 512]
    assert len(per_iteration) <= 2, (len(per_iteration), res.iterations)      # start block, result

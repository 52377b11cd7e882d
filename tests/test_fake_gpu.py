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
    few scalars of the time-step control to the host, in one transfer, and nothing back."""
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team
    m = bomex_like((16, 16, 16), Team.world(), device="gpu")
    m.step()
    moved = _moved_during(m.step)
    m.free()
    # Courant rate, the blow-up sum, the largest ekm and ekh: 4 doubles
    assert moved == [("to_host", 32)], moved


def test_the_launch_counter_counts_what_a_gpu_launches():
    """Elementwise operations, reductions, copies into slices and raw kernels count; views and
    empty allocations do not (bench/gpu_launches.py relies on it)."""
    x = cupy.zeros((4, 5))                            # a memset: one
    fake.launches.clear()
    y = x[1:, ::2]                                    # a view: none
    z = cupy.empty((3, 3))                            # no kernel
    y = y + 1.0                                       # one
    x[0] = 2.0                                        # one
    x[1:, 1:] += 1.0                                  # the add and the copy back: two
    s = cupy.sum(x, axis=0)                           # one
    t = x[cupy.asarray(np.array([0, 2]))]             # a gather: one (and one host -> device copy)
    assert sum(fake.launches.values()) == 6, dict(fake.launches)
    assert y.shape == (3, 3) and z.shape == (3, 3) and s.shape == (5,) and t.shape == (2, 5)


@pytest.mark.parametrize("scheme, most", [("2nd", 125), ("5th", 125)])
def test_les_step_launches_few_kernels(scheme, most):
    """A BOMEX-like GPU step is launch-bound on the reference 64 x 64 x 80 grid: its kernel launches
    per step (independent of the grid size) must not creep back up. 2488 with the array-API source
    only; 124 after the CUDA kernels (bench/gpu_launches.py shows where they are)."""
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team
    m = bomex_like((12, 10, 12), Team.world(), device="gpu", scheme=scheme)
    m.step()
    fake.launches.clear()
    m.step()
    m.free()
    assert sum(fake.launches.values()) <= most, dict(fake.launches)


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


@pytest.mark.mpi
def test_halo_faces_stay_on_the_device_exactly_when_mpi_is_gpu_aware(team):
    """A CUDA-aware MPI (here: the stand-in's memory handed to MPI, HPCSUITE_GPU_AWARE_MPI=1) gets
    the packed faces as device buffers: a halo update copies nothing to or from the host. Without
    one, every face crosses twice (out through the host, back onto the device). The ghosts are right
    either way."""
    from hpcsuite import pgas
    from hpcsuite.runtime import gpu_aware_mpi
    n = 6 * team.size
    ref = np.arange(n * 5, dtype=float).reshape(n, 5)
    a = pgas.from_numpy(ref, dist=(pgas.BLOCKED, pgas.NONE), root=None, halo=1, boundary="periodic", device="gpu")
    moved = _moved_during(a.halo.update)
    padded = a.local_with_halo.get()
    sl = a.local_slices[0]
    assert np.array_equal(padded[0, 1:-1], ref[(sl.start - 1) % n])
    assert np.array_equal(padded[-1, 1:-1], ref[sl.stop % n])
    faces = 0 if team.size == 1 else 2
    if gpu_aware_mpi():
        assert moved == [], moved
    else:
        assert sorted(d for d, _ in moved) == ["to_device"] * faces + ["to_host"] * faces, moved
    a.free()


@pytest.mark.mpi
@pytest.mark.parametrize("half", [False, True], ids=["full", "half"])
def test_sparse_ghost_rows_stay_on_the_device_exactly_when_mpi_is_gpu_aware(team, half):
    import scipy.sparse as sp

    from hpcsuite.runtime import gpu_aware_mpi
    from hpcsuite.solvers import DistCSR
    n = 7 * team.size + 3
    M = (sp.diags([4.0, -1.0, -1.0], [0, 1, -1], shape=(n, n)) + sp.coo_matrix(([0.5, 0.5], ([0, n - 1], [n - 1, 0])),
                                                                               shape=(n, n))).tocsr()
    A = DistCSR.from_scipy(M, root=None, symmetric=True, symmetric_half=half, backend="gpu")
    X = np.random.default_rng(2).random((n, 3))
    Xd = cupy.asarray(X[A.row_start:A.row_stop])
    Y = None

    def product():
        nonlocal Y
        Y = A @ Xd
    moved = _moved_during(product)
    np.testing.assert_allclose(Y.get(), (M @ X)[A.row_start:A.row_stop], rtol=1e-13)
    if gpu_aware_mpi() or team.size == 1:
        assert moved == [], moved
    else:
        assert moved and all(b <= 8 * 3 * 2 for _, b in moved), moved     # a ghost row or two each way


@pytest.mark.mpi
def test_les_step_on_several_ranks_moves_only_profiles_when_mpi_is_gpu_aware(team):
    """With a CUDA-aware MPI the halos and the pressure solver's transposes stay on the device:
    what still reaches the host in a step is scalars and vertical profiles (horizontal means);
    without one the transposes and faces are staged, field-sized."""
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import gpu_aware_mpi
    nz = 16
    m = bomex_like((16, 16, nz), team, device="gpu")
    m.step()
    moved = _moved_during(m.step)
    m.free()
    from mpi4py import MPI
    largest = team.allreduce(max((b for _, b in moved), default=0), op=MPI.MAX)
    if gpu_aware_mpi() or team.size == 1:
        assert largest <= 8 * (nz + 1), moved
    else:
        assert largest > 8 * 16 * nz, largest          # at least a staged face

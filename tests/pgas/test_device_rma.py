"""Device-resident one-sided access (pgas.device_rma): get/put/copy of GPU DistArrays through each
path (CUDA IPC, device RMA windows with a CUDA-aware MPI, host staging), checked against NumPy on
the gathered arrays (``to_numpy`` gathers the device blocks, not through the window).

On the CuPy stand-in (tests/fakegpu) the paths are real across MPI ranks: stand-in device
allocations exported with CUDA IPC live in POSIX shared memory, so the ranks alias the same bytes
(a wrong offset or a missing fence gives wrong data); with ``HPCSUITE_GPU_AWARE_MPI=1`` the stand-in
arrays expose ``__cuda_array_interface__`` with their memory, which mpi4py hands to MPI, so the
device RMA window is a real MPI window over the device blocks. Skipped without a GPU (or stand-in).
"""
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.runtime import gpu_aware_mpi, gpu_status

ok, why = gpu_status()
pytestmark = pytest.mark.skipif(not ok, reason=f"no GPU: {why}")

def _window(a, path):
    from hpcsuite.pgas.device_rma import DeviceWindow
    return DeviceWindow(a, path=path)


def _stand_in() -> bool:
    import cupy
    return cupy.__version__.endswith("fake")


def _force_aware(monkeypatch):
    """On the stand-in, force the CUDA-aware-MPI answer on (its arrays then expose their memory to
    mpi4py through ``__cuda_array_interface__``); on a GPU, skip unless the MPI really is."""
    if _stand_in():
        monkeypatch.setenv("HPCSUITE_GPU_AWARE_MPI", "1")
        gpu_aware_mpi.cache_clear()
    elif not gpu_aware_mpi():
        pytest.skip("the MPI is not CUDA-aware (device buffers would crash it)")


@pytest.fixture
def aware(monkeypatch):
    """The device RMA path for one test (see ``_force_aware``); restored afterwards."""
    _force_aware(monkeypatch)
    yield
    monkeypatch.undo()
    gpu_aware_mpi.cache_clear()


def _expected_path(path, team):
    if team.size == 1:
        return "host" if path == "host" else "local"
    return path


LAYOUTS = [
    ((13, 7), (pgas.BLOCKED, pgas.CYCLIC), 0),
    ((12, 6), (pgas.BLOCKCYCLIC(2), pgas.NONE), 0),
    ((11, 9), (pgas.BLOCKED, pgas.BLOCKED), (1, 2)),           # with a halo around the blocks
    ((8, 6), (pgas.TILE(2), pgas.TILE(3)), 0),                # tiles stored contiguously
]
SELECTIONS = [(slice(None), slice(None)), (slice(1, None, 3), slice(None, None, 2)),
              (slice(None, None, -2), 3), (5, slice(1, 6)), (4, 2), (Ellipsis, slice(2, 3))]


def _run_paths(team, path, shape, dist, halo, expect=None):
    import cupy
    rng = np.random.default_rng(11)
    ref = rng.standard_normal(shape)
    kw = dict(dist=dist, root=None, device="gpu")
    if halo:
        kw["halo"] = halo
    a = pgas.from_numpy(ref, **kw)
    w = _window(a, path)
    assert w.path == (expect or _expected_path(path, team)), (w.path, w.routes)
    if expect is None and path != "host":
        assert all(r == ("local" if u == team.rank else path) for u, r in w.routes.items()), w.routes
    # gets of every selection, from every rank (remote and local owners)
    for sel in SELECTIONS:
        got = w.get(sel)
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(got), ref[sel])
    h = w.get_async(SELECTIONS[1])
    np.testing.assert_array_equal(cupy.asnumpy(h.wait()), ref[SELECTIONS[1]])
    out = cupy.empty(ref[SELECTIONS[1]].shape)
    assert w.get(SELECTIONS[1], out=out) is out
    np.testing.assert_array_equal(cupy.asnumpy(out), ref[SELECTIONS[1]])
    # puts: each rank writes its own rows (strided over the ranks), device values and scalars
    w.fence()
    expect = ref.copy()
    rows = slice(team.rank, None, team.size)
    val = rng.standard_normal(expect[rows, ::2].shape) + 100 * (team.rank + 1)   # same rng on all ranks
    vals = team.comm.allgather(val)
    w.put((rows, slice(None, None, 2)), cupy.asarray(val))
    nrows = len(range(team.rank, shape[0], team.size))
    h = w.put_async((rows, 1), cupy.full(2 * nrows, -1.0 - team.rank)[::2])   # a strided source
    h.wait()
    w.fence()
    for r in range(team.size):
        expect[r::team.size, ::2] = vals[r]
        expect[r::team.size, 1] = -1.0 - r
    np.testing.assert_array_equal(a.to_numpy(), expect)            # the device blocks, gathered
    np.testing.assert_array_equal(cupy.asnumpy(w.get(...)), expect)  # and through the window
    w.free()
    a.free()


# every layout through IPC; two each through host staging and device RMA (CI time: the three
# paths share the planning code, and the host path is the arrays' own one-sided access)
@pytest.mark.mpi
@pytest.mark.parametrize("path, shape, dist, halo", [("ipc",) + x for x in LAYOUTS]
                         + [("host",) + LAYOUTS[i] for i in (0, 2)])
def test_gpu_device_window_get_put_match_numpy(team, path, shape, dist, halo):
    """IPC between the ranks' device memories, and host staging: strided selections, every owner."""
    _run_paths(team, path, shape, dist, halo)


@pytest.mark.mpi
@pytest.mark.parametrize("shape, dist, halo", [LAYOUTS[i] for i in (1, 3)])
def test_gpu_device_window_cuda_aware_rma_matches_numpy(team, aware, shape, dist, halo):
    """Device RMA windows (a CUDA-aware MPI, forced): MPI_Get/Put on the device blocks."""
    _run_paths(team, "mpi", shape, dist, halo)


@pytest.mark.mpi
def test_gpu_device_window_ipc_on_the_node_rma_between_nodes(team, aware, monkeypatch):
    """Pretend nodes of two ranks (one at 2 ranks): IPC within a node, device RMA between nodes,
    both in one access."""
    if team.size == 1:
        pytest.skip("needs two pretend nodes")
    monkeypatch.setenv("HPCSUITE_PGAS_DEVICE_NODE_SIZE", "2" if team.size > 2 else "1")
    _run_paths(team, "auto", *LAYOUTS[0], expect="ipc+mpi" if team.size > 2 else "mpi")


@pytest.mark.mpi
def test_gpu_device_window_path_choice_env_and_errors(team, monkeypatch):
    from hpcsuite.pgas import device_rma
    a = pgas.zeros((4 * team.size, 3), device="gpu")
    w = device_rma.DeviceWindow(a)                      # auto
    # one node in these runs: IPC when there are peers (or staging when the MPI is not CUDA-aware
    # and IPC failed, which the stand-in never does)
    assert w.path == ("local" if team.size == 1 else "ipc")
    w2 = device_rma.DeviceWindow(a)                     # a second window over the same block
    w2.put(((team.rank + 1) % team.size * 4, 0), 5.0 + team.rank)
    w.fence()
    assert float(w.get((team.rank * 4, 0))) == 5.0 + (team.rank - 1) % team.size
    w2.free()
    assert float(w.get((team.rank * 4, 0))) == 5.0 + (team.rank - 1) % team.size   # w still open
    w.free()
    monkeypatch.setenv(device_rma.ENV, "host")
    with device_rma.DeviceWindow(a) as w:
        assert w.path == "host" and set(w.routes.values()) == {"host"}
    monkeypatch.setenv(device_rma.ENV, "bogus")
    with pytest.raises(ValueError, match="HPCSUITE_PGAS_DEVICE_PATH must be one of"):
        device_rma.DeviceWindow(a)
    monkeypatch.delenv(device_rma.ENV)
    with pytest.raises(ValueError, match="path must be one of"):
        device_rma.DeviceWindow(a, path="nvlink")
    if not gpu_aware_mpi():
        with pytest.raises(ValueError, match="needs a CUDA-aware MPI"):
            device_rma.DeviceWindow(a, path="mpi")
    cpu = pgas.zeros(4)
    with pytest.raises(ValueError, match="device='gpu'"):
        device_rma.DeviceWindow(cpu)
    cpu.free()
    a.free()
    assert device_rma.live_windows() == 0


@pytest.mark.mpi
@pytest.mark.parametrize("path", ["ipc", "mpi", "host"])
def test_gpu_device_window_fence_flush_and_mutex_order(team, monkeypatch, path):
    """Epochs: a local device write is seen by the others after a fence; an async put is at the
    owner after flush (+ a barrier for the reader); increments under a Mutex are never lost."""
    import cupy
    if path == "mpi":
        _force_aware(monkeypatch)
    try:
        n = team.size
        a = pgas.zeros(4 * n, dtype=np.int64, device="gpu")
        w = _window(a, path)
        a.local[...] = 10 * (team.rank + 1)                         # local writes, then a fence
        w.fence()
        got = cupy.asnumpy(w.get(slice(None)))
        assert np.array_equal(got, np.repeat(10 * (np.arange(n) + 1), 4))
        w.fence()
        # an async put into the next rank's block, completed by flush, read after a barrier
        nxt = (team.rank + 1) % n
        h = w.put_async(4 * nxt + 1, 7 + team.rank)
        w.flush()
        team.barrier()
        prev = (team.rank - 1) % n
        assert int(w.get(4 * team.rank + 1)) == 7 + prev            # through the window, at once
        w.fence()
        h.wait()
        assert int(cupy.asnumpy(a.local)[1]) == 7 + prev            # and in the owner's block
        # read-modify-write under the mutex on an element of rank 0
        m = pgas.Mutex()
        for _ in range(3):
            with m:
                v = w.get(2)
                w.put(2, v + 1)
        w.fence()
        assert int(w.get(2)) == 10 + 3 * n
        assert int(cupy.asnumpy(a.local)[2]) == (10 + 3 * n if team.rank == 0 else 10 * (team.rank + 1))
        m.free()
        w.free()
        a.free()
    finally:
        if path == "mpi":
            monkeypatch.undo()
            gpu_aware_mpi.cache_clear()


@pytest.mark.mpi
def test_gpu_device_copy_between_layouts(team, monkeypatch):
    """device_rma.copy: each rank pulls its destination block one-sidedly from the source's
    device blocks (BLOCKED with a halo -> CYCLIC, TILE -> BLOCKED through a window kept open);
    a destination whose blocks are no progression, or forced host staging, go by Alltoallw."""
    from hpcsuite.pgas import device_rma
    ref = np.arange(16 * 4, dtype=np.float64).reshape(16, 4) * 1.5
    src = pgas.from_numpy(ref, dist=(pgas.BLOCKED, pgas.NONE), root=None, halo=(1, 0), device="gpu")
    dst = pgas.zeros((16, 4), dist=(pgas.CYCLIC, pgas.NONE), device="gpu")
    # (one unit: the same layout)
    assert device_rma.copy(src, dst) == ("same-layout" if team.size == 1 else "ipc")
    np.testing.assert_array_equal(dst.to_numpy(), ref)
    tiled = pgas.zeros((16, 4), dist=(pgas.TILE(2), pgas.TILE(2)), device="gpu")
    assert device_rma.copy(dst, tiled) == "alltoallw"             # tiles: no pull into them
    np.testing.assert_array_equal(tiled.to_numpy(), ref)
    monkeypatch.setenv(device_rma.ENV, "host")                     # staging: Alltoallw instead
    assert device_rma.pull_copy(tiled, src) is None
    monkeypatch.delenv(device_rma.ENV)
    src.local[...] = 0.0
    with device_rma.DeviceWindow(tiled) as w:                      # a window kept open, reused
        assert device_rma.pull_copy(tiled, src, window=w) == _expected_path("ipc", team)
    np.testing.assert_array_equal(src.to_numpy(), ref)
    small = pgas.zeros((3, 4), device="gpu")
    with pytest.raises(ValueError, match="shapes differ"):
        device_rma.copy(src, small)
    for x in (src, dst, tiled, small):
        x.free()


def test_gpu_stand_in_ipc_rules():
    """The stand-in's CUDA IPC behaves as CUDA's where the code relies on it: only cudaMalloc'd
    (``Memory``) allocations export, a handle names the whole allocation (interior pointers too),
    and a process cannot open its own handle."""
    import cupy
    if not _stand_in():
        pytest.skip("checks the CuPy stand-in (tests/fakegpu)")
    import cupy.cuda.memory as mem
    import cupy.cuda.runtime as rt
    block = mem.Memory(64)
    arr = cupy.ndarray((8,), np.float64, mem.MemoryPointer(block, 0))
    arr[...] = cupy.arange(8.0)
    h = rt.ipcGetMemHandle(arr.data.ptr + 16)
    assert h == rt.ipcGetMemHandle(block.ptr) and len(h) == 64
    with pytest.raises(rt.CUDARuntimeError, match="own"):
        rt.ipcOpenMemHandle(h)
    with pytest.raises(rt.CUDARuntimeError, match="exports only"):
        rt.ipcGetMemHandle(cupy.zeros(4).data.ptr)
    view = cupy.ndarray((2,), np.float64, mem.MemoryPointer(block, 48))
    assert cupy.asnumpy(view).tolist() == [6.0, 7.0]

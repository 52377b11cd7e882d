"""DistArrays with device="gpu": local blocks are CuPy arrays; halos, copies, gathers and one-sided
access (through the host mirror, between update_host/update_device) still work. Skipped cleanly
where no GPU is usable."""
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.runtime import gpu_status

ok, why = gpu_status()
pytestmark = pytest.mark.skipif(not ok, reason=f"no GPU: {why}")


@pytest.mark.mpi
def test_gpu_local_blocks_halo_and_gather(team):
    import cupy
    ref = np.arange(40 * 6, dtype=np.float64).reshape(40, 6)
    a = pgas.from_numpy(ref, dist=(pgas.BLOCKED, pgas.NONE), root=None, halo=1, boundary="periodic",
                        device="gpu")
    assert isinstance(a.local, cupy.ndarray)
    assert np.array_equal(a.to_numpy(), ref)
    a.halo.update()
    padded = cupy.asnumpy(a.local_with_halo)
    sl = a.local_slices[0]
    assert np.array_equal(padded[0, 1:-1], ref[(sl.start - 1) % 40])
    assert np.array_equal(padded[-1, 1:-1], ref[sl.stop % 40])
    b = pgas.zeros((40, 6), dist=(pgas.CYCLIC, pgas.NONE), device="gpu")
    pgas.copy(a, b)
    assert np.array_equal(b.to_numpy(), ref)
    a.free()
    b.free()


@pytest.mark.mpi
@pytest.mark.parametrize("shape, halo, boundary", [
    ((11, 9, 4), (2, 1, 0), ("periodic", "periodic", "none")),     # LES-like: corners in x-y
    ((7, 6, 5), (1, 2, 1), "periodic"),                              # every dimension wraps
    ((9, 8), (2, 2), ("periodic", 3.5)),                             # a fill value next to a wrap
])
def test_gpu_halo_matches_cpu_halo(team, shape, halo, boundary):
    """Every ghost cell of a device halo update (its wrap-around copies fused into one gather and
    one scatter) equals the host update's, also when it updates another array (``target=``)."""
    import cupy
    ref = np.random.default_rng(3).random(shape)
    kw = dict(dist=(pgas.BLOCKED,) * len(shape), root=None, halo=halo, boundary=boundary, corners=True)
    host = pgas.from_numpy(ref, **kw)
    dev = pgas.from_numpy(ref, device="gpu", **kw)
    host.halo.update()
    dev.halo.update()
    expect = host.local_with_halo.copy()
    assert np.array_equal(cupy.asnumpy(dev.local_with_halo), expect)
    work = cupy.zeros_like(dev.local_with_halo)
    inner = tuple(slice(w, w + n) for w, n in zip(halo, dev.local.shape))
    work[inner] = dev.local
    dev.local[...] = -1.0                        # the array's own block must not be read
    dev.halo.update(target=work)
    assert np.array_equal(cupy.asnumpy(work), expect)     # (unwritten ghosts are zero in both)
    with pytest.raises(ValueError, match="target must be"):
        dev.halo.update(target=cupy.zeros(3))
    host.free()
    dev.free()


@pytest.mark.mpi
def test_gpu_halo_group_matches_each_arrays_host_halo(team):
    """A HaloGroup of LES-like fields (one with an extra level, one a halo-less layout of its own)
    fills every ghost cell as each array's host update does; its wrap-around copies are one kernel
    launch on the stand-in (tests/fakegpu), whatever the process grid."""
    import cupy
    kw = dict(dist=(pgas.BLOCKED, pgas.BLOCKED, pgas.NONE), root=None, halo=(2, 1, 0),
              boundary=("periodic", "periodic", "none"), corners=True)
    rng = np.random.default_rng(5)
    refs = [rng.random((11, 9, nz)) for nz in (4, 5, 4)]
    hosts = [pgas.from_numpy(r, **kw) for r in refs]
    devs = [pgas.from_numpy(r, device="gpu", **kw) for r in refs]
    for h in hosts:
        h.halo.update()
    group = pgas.HaloGroup(devs)
    counter = getattr(getattr(cupy, "_core", None), "launches", None)     # (the stand-in's)
    if counter is not None:
        counter.clear()
    group.update()
    for h, d in zip(hosts, devs):
        assert np.array_equal(cupy.asnumpy(d.local_with_halo), h.local_with_halo)
    if counter is not None:
        wraps = sum(1 for h in devs[0].halo._self_copies)
        expect = 1 if wraps > 1 else 0
        assert counter["raw:hpc_copy_within_many64"] == expect, dict(counter)
        assert counter["raw:hpc_copy_within64"] == 0, dict(counter)
    # work arrays updated through one array's plan, twice in one group (its exchanges in turn)
    inner = tuple(slice(w, w + n) for w, n in zip((2, 1, 0), devs[0].local.shape))
    works = [cupy.zeros_like(devs[0].local_with_halo) for _ in range(2)]
    for w, h in zip(works, (hosts[0], hosts[2])):
        w[inner] = cupy.asarray(h.local_with_halo[inner])
    pgas.HaloGroup([devs[0], devs[0]], works).update()
    for w, h in zip(works, (hosts[0], hosts[2])):
        assert np.array_equal(cupy.asnumpy(w), h.local_with_halo)
    with pytest.raises(ValueError, match="target must be"):
        pgas.HaloGroup([devs[0]], [cupy.zeros(3)])
    for a in hosts + devs:
        a.free()


@pytest.mark.mpi
def test_gpu_one_sided_access_through_host_mirror(team):
    a = pgas.zeros(17 * team.size, device="gpu")
    a.local[...] = team.rank
    a.update_host()                      # device -> host mirror, then barrier
    assert np.array_equal(a[::17], np.arange(team.size, dtype=float))
    a.sync()                             # everyone has read before rank 0 writes
    if team.rank == 0:
        a[:] = 5.0
    a.update_device()                    # host mirror (with the remote puts) -> device
    assert float(a.local.sum()) == 5.0 * a.local.size
    a.free()


@pytest.mark.mpi
def test_gpu_summa_result_stays_on_the_device(team):
    """pgas.matmul of GPU operands returns a GPU array (its result was made on the host before)."""
    import cupy
    rng = np.random.default_rng(7)
    ra, rb = rng.standard_normal((12, 8)), rng.standard_normal((8, 10))
    a = pgas.from_numpy(ra, dist=(pgas.BLOCKED, pgas.NONE), root=None, device="gpu")
    b = pgas.from_numpy(rb, dist=(pgas.NONE, pgas.CYCLIC), root=None, device="gpu")
    c = pgas.matmul(a, b)
    assert c.device.is_gpu and isinstance(c.local, cupy.ndarray)
    np.testing.assert_allclose(c.to_numpy(), ra @ rb, rtol=1e-12, atol=1e-12)
    for x in (a, b, c):
        x.free()

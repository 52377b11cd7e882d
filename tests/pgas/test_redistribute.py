"""copy(src, dst) between every pair of distributions and process grids, against NumPy."""
import itertools

import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE, TILE
from hpcsuite.pgas.redistribute import _on_one_node

from reference import all_dists, shape_for


def _team_on_one_node(team) -> bool:
    """Whether MPI puts every rank of ``team`` on one node (under a multi-node ``srun`` it does not)."""
    from mpi4py import MPI
    node = team.comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return team.comm.allreduce(node.size, op=MPI.MIN) == team.size
    finally:
        node.Free()


def _grid(dist):
    return tuple(0 if s.kind != "none" else 1 for s in dist)


@pytest.mark.mpi
@pytest.mark.parametrize("shm", [True, False], ids=["shared-memory", "alltoallw"])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_copy_between_every_pair_of_distributions(team, nd, shm):
    """Both ways of moving the data: read from the peers' shared-memory windows (the whole team
    on one node, as under mpiexec here) and one Alltoallw (arrays without shared-memory views, or a
    team across nodes, as under the multi-node srun of tests/jobs)."""
    shape = shape_for(all_dists(nd)[0])
    ref = np.random.default_rng(nd).standard_normal(shape)
    dists = [d for d in all_dists(nd) if not all(s.kind == "none" for s in d)]
    # allocate each layout once (window creation is the expensive collective), copy every pair
    srcs = [pgas.from_numpy(ref, dist=d, root=None, grid=_grid(d), shm=shm) for d in dists]
    dsts = [pgas.zeros(shape, dist=d, grid=_grid(d), shm=shm) for d in dists]
    one_node = _team_on_one_node(team)
    for a, b in itertools.product(srcs, dsts):
        b.local[...] = np.nan
        assert _on_one_node(a, b) == (shm and one_node and not a.pattern.tiled and not b.pattern.tiled)
        pgas.copy(a, b)
        # the destination's local view holds exactly its owned elements
        g = np.broadcast_arrays(*b.local_global_indices())
        assert np.array_equal(b.local, ref[tuple(g)]), (a.dist, b.dist)
    assert np.array_equal(dsts[-1].to_numpy(), ref)
    for x in srcs + dsts:
        x.free()


@pytest.mark.mpi
@pytest.mark.parametrize("shm", [True, False], ids=["shared-memory", "alltoallw"])
def test_copy_across_process_grids_tiles_and_halos(team, shm):
    shape = (36, 10)
    ref = np.arange(360.0).reshape(shape)
    n = team.size
    layouts = [
        dict(dist=(BLOCKED, BLOCKED), grid=(n, 1)),
        dict(dist=(BLOCKED, BLOCKED), grid=(1, n)),                # the transposed grid
        dict(dist=(BLOCKCYCLIC(4), BLOCKCYCLIC(5)), grid=(0, 0)),
        dict(dist=(TILE(4), TILE(5)), grid=(0, 0)),
        dict(dist=(TILE(4), TILE(5)), grid=(1, n)),
        dict(dist=(BLOCKED, NONE), halo=1, boundary="periodic"),
        dict(dist=(CYCLIC, NONE)),
    ]
    srcs = [pgas.from_numpy(ref, root=None, shm=shm, **kw) for kw in layouts]
    dsts = [pgas.zeros(shape, shm=shm, **kw) for kw in layouts]
    for (i, a), (j, b) in itertools.product(enumerate(srcs), enumerate(dsts)):
        b.local[...] = -1.0
        pgas.copy(a, b)
        g = np.broadcast_arrays(*b.local_global_indices())
        assert np.array_equal(b.local, ref[tuple(g)]), (layouts[i], layouts[j])
    for x in srcs + dsts:
        x.free()


@pytest.mark.mpi
def test_copy_converts_dtype_and_checks_arguments(team):
    a = pgas.arange(50, dist=CYCLIC)                       # int64
    b = pgas.zeros(50, dtype=np.float32, dist=BLOCKED)
    pgas.copy(a, b)
    assert b.to_numpy().dtype == np.float32 and np.array_equal(b.to_numpy(), np.arange(50))
    c = pgas.zeros(49)
    with pytest.raises(ValueError, match=r"shapes differ: source \(50,\), destination \(49,\)"):
        pgas.copy(a, c)
    if team.size > 1:
        sub = team.split(0 if team.rank == 0 else 1)
        d = pgas.zeros(50, team=sub)
        with pytest.raises(ValueError, match="same team"):
            pgas.copy(a, d)
        d.free()
    for x in (a, b, c):
        x.free()


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


@pytest.mark.mpi
@pytest.mark.parametrize("shm", [True, False], ids=["shared-memory", "alltoallw"])
def test_redistribution_memory_stays_near_the_local_part(team, shm):
    """Peak resident memory grows by at most about twice the local part (never the whole array).
    Reading peers' shared-memory windows maps their pages into this process (RssShmem): that is
    not new memory and is not counted."""
    n = 2**21 * team.size                     # 16 MiB of float64 per rank
    a = pgas.zeros((n // 512, 512), dist=(BLOCKED, NONE), shm=shm)
    b = pgas.zeros((n // 512, 512), dist=(BLOCKCYCLIC(8), NONE), shm=shm)
    a.local[...] = 1.0
    b.local[...] = 0.0                        # touch every page before measuring
    local_kib = a.local.nbytes // 1024
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                          # reset the peak (VmHWM) to the current RSS
    base, shared = _status_kib("VmHWM"), _status_kib("RssShmem")
    pgas.copy(a, b)
    grown = _status_kib("VmHWM") - base - (_status_kib("RssShmem") - shared)
    assert np.all(b.local == 1.0)
    assert grown <= 2.2 * local_kib + 8 * 1024, (grown, local_kib)
    a.free()
    b.free()

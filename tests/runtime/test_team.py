"""Teams and process grids, checked against independent arithmetic at whatever size mpiexec gave."""
import itertools
import math

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.runtime import block_owner, block_range, grid_shape


@pytest.mark.mpi
def test_world_rank_and_size(team):
    assert team.size == MPI.COMM_WORLD.Get_size()
    assert team.rank == MPI.COMM_WORLD.Get_rank()
    ranks = team.allgather(team.rank)
    assert ranks == list(range(team.size))


@pytest.mark.mpi
@pytest.mark.parametrize("ndims", [1, 2, 3])
def test_grid_covers_every_coordinate_once(team, ndims):
    g = team.grid(ndims)
    assert math.prod(g.dims) == team.size and len(g.dims) == ndims
    # balanced like MPI_Dims_create: extents non-increasing, none larger than needed
    assert list(g.dims) == sorted(g.dims, reverse=True)
    coords = team.allgather(g.coords)
    assert sorted(coords) == sorted(itertools.product(*(range(d) for d in g.dims)))
    # row-major ranks (no reordering) and local arithmetic agree with MPI's topology
    assert coords == [g.coords_of(r) for r in range(team.size)]
    assert all(g.rank_of(c) == r for r, c in enumerate(coords))


@pytest.mark.mpi
def test_grid_shift_matches_neighbour_coordinates(team):
    g = team.grid(2, periods=[True, False])
    src, dst = g.shift(0, 1)
    assert g.coords_of(dst) == ((g.coords[0] + 1) % g.dims[0], g.coords[1])
    assert g.coords_of(src) == ((g.coords[0] - 1) % g.dims[0], g.coords[1])
    src, dst = g.shift(1, 1)
    if g.coords[1] == g.dims[1] - 1:
        assert dst == MPI.PROC_NULL
    else:
        assert g.coords_of(dst) == (g.coords[0], g.coords[1] + 1)
    # the value passed along a periodic ring comes back to where it started
    val = np.array([float(team.rank)])
    out = np.empty(1)
    s, d = g.shift(0, 1)
    g.Sendrecv(val, d, out, s)
    assert out[0] == s


@pytest.mark.mpi
def test_explicit_grid_and_sub_grids(team):
    g = team.grid([team.size, 0])
    assert g.dims == (team.size, 1)
    rows = g.sub([False, True])
    assert rows.size == 1
    cols = g.sub([True, False])
    assert cols.size == team.size
    assert cols.rank == g.coords[0]


@pytest.mark.mpi
def test_split_by_colour(team):
    sub = team.split(team.rank % 2)
    expected = [r for r in range(team.size) if r % 2 == team.rank % 2]
    assert sub.size == len(expected)
    assert sub.rank == expected.index(team.rank)
    assert sub.allgather(team.rank) == expected
    assert sub.parent is team
    # leaving some ranks out
    sub2 = team.split(None if team.rank == 0 else 0)
    if team.rank == 0:
        assert sub2 is None
    else:
        assert sub2.size == team.size - 1


@pytest.mark.mpi
def test_split_by_node(team):
    from hpcsuite.jobs.env import this_node
    node = team.split_by_node()
    # under mpiexec every rank shares this machine; under the emulated multi-node srun of
    # tests/jobs the node is SLURM's (one host name, several nodes)
    me = this_node()
    hosts = team.allgather(me)
    assert node.size == hosts.count(me)
    index, count = team.node_layout()
    assert count == len(set(hosts))
    assert index == list(dict.fromkeys(hosts)).index(me)  # by lowest rank


@pytest.mark.mpi
def test_bad_grid_raises_on_every_rank_before_communicating(team):
    with pytest.raises(ValueError, match="cannot hold"):
        team.grid([team.size + 1])
    with pytest.raises(ValueError, match="non-negative"):
        team.grid([-1, 0])
    with pytest.raises(ValueError, match="color"):
        team.split(-3)
    team.barrier()   # everyone is still in step


def test_grid_shape_is_mpi_dims_create():
    for size in range(1, 13):
        for nd in (1, 2, 3):
            assert grid_shape(size, nd) == tuple(MPI.Compute_dims(size, nd))
    assert grid_shape(12, [0, 3]) == (4, 3)
    with pytest.raises(ValueError):
        grid_shape(6, [4, 0])
    with pytest.raises(ValueError):
        grid_shape(4, [3, 1])
    with pytest.raises(ValueError):
        grid_shape(4, True)


@pytest.mark.parametrize("n,p", [(10, 4), (37, 5), (1031, 3), (3, 3), (0, 2), (5, 7)])
def test_block_range_partitions_exactly(n, p):
    ranges = [block_range(n, p, i) for i in range(p)]
    sizes = [b - a for a, b in ranges]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(p - 1))
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    # the same split as numpy's array_split
    assert sizes == [len(c) for c in np.array_split(np.arange(n), p)]
    for i in range(n):
        b = block_owner(i, n, p)
        assert ranges[b][0] <= i < ranges[b][1]

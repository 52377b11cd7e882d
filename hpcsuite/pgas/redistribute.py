"""Redistribution: ``copy(src, dst)`` between distributed arrays of any two patterns.

DASH leaves global-to-global copy between different distributions unimplemented; Heat can only
move its single split axis. Here one ``MPI_Alltoallw`` moves the data between any two patterns
(any distribution specs per dimension, any process grids, tiles, halos) of the same team.

How: along each dimension a unit's owned global indices are grouped by the other pattern's owning
coordinate (closed-form owner maps, O(local extent) work, no per-rank tables), and every peer that
shares data gets one derived datatype addressing the elements in place in the stored block. No
element is packed by hand; the extra memory is whatever MPI needs internally for the messages,
never the whole array on one rank.

When the whole team shares one node (and both arrays map their peers' storage, the default), there
is a faster way than any message: every rank reads the pieces of its destination block straight
from its peers' source storage in the shared-memory windows, one copy per element instead of
MPI's pack, transfer and unpack, with a barrier before (sources complete) and after (sources no
longer read). The plan is the same grouping as above, from the receiver's side, and is cached.

GPU arrays: the same layout is a device-to-device copy; otherwise, with a CUDA-aware MPI
(``runtime.gpu_aware_mpi``) the ``Alltoallw`` runs on the device storages, and without one the
data is staged through the host segments.
"""
from __future__ import annotations

import atexit
import collections
import math

import numpy as np
from mpi4py import MPI

from ..runtime.device import gpu_aware_mpi
from .access import DimPart, Piece, as_progression, target_datatype

__all__ = ["copy", "copy_plan_counts"]

_DIRECT_PLANS: "collections.OrderedDict" = collections.OrderedDict()


def _groups(my_map, my_coord: int, other_map) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For my owned indices along one dimension: ``{other_coord: (my_local, other_local)}``."""
    g = my_map.owned(my_coord)
    if g.size == 0:
        return {}
    own = other_map.owner(g)
    mine_local = np.arange(g.size, dtype=np.int64)
    if other_map.p == 1:
        return {0: (mine_local, other_map.local(g))}
    if not other_map.cyclic and np.all(np.diff(own) >= 0):
        cuts = np.flatnonzero(np.diff(own)) + 1
        bounds = np.concatenate(([0], cuts, [g.size]))
        return {int(own[a]): (mine_local[a:b], other_map.local(g[a:b])) for a, b in zip(bounds[:-1], bounds[1:])}
    order = np.argsort(own, kind="stable")
    cuts = np.flatnonzero(np.diff(own[order])) + 1
    out = {}
    for idx in np.split(order, cuts):
        out[int(own[idx[0]])] = (mine_local[idx], other_map.local(g[idx]))
    return out


def _side_types(array, my_pattern, other_pattern, rank, base):
    """Per peer unit: ``(count, displacement_bytes, datatype)`` addressing my stored elements that
    go to (or come from) that peer under ``other_pattern``; derived types to free are returned."""
    nd = my_pattern.ndim
    coords = my_pattern.unit_coords(rank)
    per_dim = [_groups(my_pattern.maps[d], coords[d], other_pattern.maps[d]) for d in range(nd)]
    storage_shape = array.padded_storage_shape(rank)
    halo = array.halo_width if any(array.halo_width) else None
    itemsize = base.Get_size()
    specs, to_free = {}, []
    if any(not g for g in per_dim):
        return specs, to_free
    import itertools
    for combo in itertools.product(*(sorted(g.items()) for g in per_dim)):
        peer = other_pattern.unit_of([c for c, _ in combo])
        parts = tuple(DimPart(coords[d], slice(None), as_progression(combo[d][1][0])) for d in range(nd))
        dtype, disp, count = target_datatype(Piece(rank, parts), my_pattern, storage_shape, base, halo)
        if dtype is base:
            specs[peer] = (count, disp * itemsize, base)
        else:
            specs[peer] = (1, 0, dtype)
            to_free.append(dtype)
    return specs, to_free


_PLANS: "collections.OrderedDict" = collections.OrderedDict()
_MAX_PLANS = 32


def _geometry(a) -> tuple:
    """What a redistribution plan depends on (never the data or its address)."""
    return (a.shape, a.dist, a.grid, a.halo_width, a.dtype.str, a.team.size)


def _plan(src, dst):
    """Alltoallw counts, byte displacements and datatypes for both sides; cached (LRU) by the
    arrays' geometry, since repeated redistributions between the same layouts are common (e.g.
    the transposes of a pencil FFT every time step). Local."""
    key = (_geometry(src), _geometry(dst), src.team.rank)
    hit = _PLANS.get(key)
    if hit is not None:
        _PLANS.move_to_end(key)
        return hit[0], hit[1]
    base, rank, n = dst.mpitype, src.team.rank, src.team.size
    sspec, sfree = _side_types(src, src.pattern, dst.pattern, rank, base)
    rspec, rfree = _side_types(dst, dst.pattern, src.pattern, rank, base)
    empty = (0, 0, base)
    s = [sspec.get(u, empty) for u in range(n)]
    r = [rspec.get(u, empty) for u in range(n)]
    sendspec = ([x[0] for x in s], [x[1] for x in s], [x[2] for x in s])
    recvspec = ([x[0] for x in r], [x[1] for x in r], [x[2] for x in r])
    _PLANS[key] = (sendspec, recvspec, sfree + rfree)
    if len(_PLANS) > _MAX_PLANS:
        _, (_, _, old) = _PLANS.popitem(last=False)
        for t in old:
            t.Free()
    return sendspec, recvspec


@atexit.register
def _free_plans() -> None:
    if not MPI.Is_finalized():
        for _, _, types in _PLANS.values():
            for t in types:
                t.Free()
    _PLANS.clear()


_MAX_PIECES = 1024            # slice copies per peer before fancy indexing is cheaper


def _runs(mine: np.ndarray, theirs: np.ndarray) -> list[tuple[slice, slice]]:
    """The index pairs cut into runs consecutive on both sides, as slice pairs."""
    brk = np.flatnonzero((np.diff(mine) != 1) | (np.diff(theirs) != 1)) + 1
    starts = np.concatenate(([0], brk))
    stops = np.concatenate((brk, [len(mine)]))
    return [(slice(int(mine[a]), int(mine[a]) + int(b - a)), slice(int(theirs[a]), int(theirs[a]) + int(b - a)))
            for a, b in zip(starts, stops)]


def _direct_plan(src, dst) -> list:
    """``[(source unit, [(destination local index, source local index), ...]), ...]`` for this
    rank's destination block, read from the source units' storage; cached by geometry. Local.

    Each peer's part is a product of per-dimension index sets; cut into runs consecutive on both
    sides it becomes a few rectangular slice copies (block-cyclic rows: one per block), and only
    when that would take more than ``_MAX_PIECES`` copies (cyclic) one fancy-indexed copy."""
    key = (_geometry(src), _geometry(dst), dst.team.rank)
    hit = _DIRECT_PLANS.get(key)
    if hit is not None:
        _DIRECT_PLANS.move_to_end(key)
        return hit
    dp, sp = dst.pattern, src.pattern
    coords = dp.unit_coords(dst.team.rank)
    per_dim = [_groups(dp.maps[d], coords[d], sp.maps[d]) for d in range(dp.ndim)]
    plan = []
    if all(per_dim):
        import itertools
        for combo in itertools.product(*(sorted(g.items()) for g in per_dim)):
            runs = [_runs(*c[1]) for c in combo]
            if math.prod(len(r) for r in runs) <= _MAX_PIECES:
                pieces = [tuple(zip(*prod)) for prod in itertools.product(*runs)]
            else:
                pieces = [(np.ix_(*(c[1][0] for c in combo)), np.ix_(*(c[1][1] for c in combo)))]
            plan.append((sp.unit_of([c[0] for c in combo]), pieces))
    _DIRECT_PLANS[key] = plan
    if len(_DIRECT_PLANS) > _MAX_PLANS:
        _DIRECT_PLANS.popitem(last=False)
    return plan


def _on_one_node(src, dst) -> bool:
    """Whether every unit's storage of both arrays is mapped in shared memory here: the whole
    team on this node, plain (untiled) layouts. The same answer on every rank. Local."""
    for a in (src, dst):
        seg = a.segment
        if not seg.shm or a.pattern.tiled or len(seg.node_rank_of) != a.team.size:
            return False
    return True


def _copy_direct(src, dst) -> None:
    """``copy`` through shared memory (see the module notes). Collective."""
    team = src.team
    src.segment.flush()                    # my source writes visible to the node ...
    team.barrier()                      # ... and everyone's, before anyone reads
    w = src.halo_width
    out = dst.host_local
    for unit, pieces in _direct_plan(src, dst):
        peer = src.peer_storage(unit)
        if any(w):
            peer = peer[tuple(slice(x, n - x) for x, n in zip(w, peer.shape))]
        for mine, theirs in pieces:
            out[mine] = peer[theirs]
    dst.segment.flush()
    team.barrier()                      # no source may change while a peer still reads it


def _copy_on_devices(src, dst) -> None:
    """``copy`` between two GPU arrays with a CUDA-aware MPI: the same ``Alltoallw`` as on the
    host, on the device storages (laid out like the host segments, so the datatypes apply).
    Collective."""
    send = src.device_storage if src.dtype == dst.dtype else src.device_storage.astype(dst.dtype)
    src.device.synchronize()            # the source is complete before MPI reads it
    sendspec, recvspec = _plan(src, dst)
    src.team.Alltoallw([send, *sendspec], [dst.device_storage, *recvspec])


def copy_plan_counts(src, dst) -> tuple[int, int]:
    """``(peers_sent_to, peers_received_from)`` of this rank for ``copy(src, dst)``. Local."""
    r = src.team.rank
    s, fs = _side_types(src, src.pattern, dst.pattern, r, src.mpitype)
    d, fd = _side_types(dst, dst.pattern, src.pattern, r, dst.mpitype)
    for t in fs + fd:
        t.Free()
    return len(s), len(d)


def copy(src, dst) -> None:
    """Copy every element of ``src`` into ``dst`` (same global shape, any two patterns). Collective.

    ``dst`` keeps its own distribution; halos of ``dst`` are not updated. Values are converted to
    ``dst.dtype`` when the dtypes differ.

    Raises
    ------
    ValueError
        On every rank, before communicating, if the shapes differ or the arrays live on different
        teams.
    """
    src.check_alive()
    dst.check_alive()
    if src.shape != dst.shape:
        raise ValueError(f"copy: shapes differ: source {src.shape}, destination {dst.shape}")
    if src.team.comm.Compare(dst.team.comm) not in (MPI.IDENT, MPI.CONGRUENT):
        raise ValueError("copy: source and destination must live on the same team")
    same_layout = (src.pattern == dst.pattern and src.pattern.tiled == dst.pattern.tiled)
    if src.device_storage is not None and dst.device_storage is not None:
        if same_layout:                 # device to device, nothing through the host
            dst.local[...] = src.local if src.dtype == dst.dtype else src.local.astype(dst.dtype)
            return
        if gpu_aware_mpi():
            _copy_on_devices(src, dst)
            return
    if src.device_storage is not None:
        src.segment.array[...] = src.device.to_host(src.device_storage)
    if same_layout:
        dst.host_local[...] = src.host_local if src.dtype == dst.dtype else src.host_local.astype(dst.dtype)
    elif _on_one_node(src, dst):
        _copy_direct(src, dst)
    else:
        send_arr = src.segment.array
        if src.dtype != dst.dtype:
            send_arr = src.segment.array.astype(dst.dtype)
        sendspec, recvspec = _plan(src, dst)
        src.team.Alltoallw([send_arr, *sendspec], [dst.segment.array, *recvspec])
    if dst.device_storage is not None:
        dst.device_storage[...] = dst.device.xp.asarray(dst.segment.array)

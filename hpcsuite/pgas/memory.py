"""Globally addressable memory for distributed arrays: MPI-3 windows over node-shared storage.

Each unit's local storage is allocated with ``MPI_Win_allocate_shared`` on the node's
sub-communicator of the team, so units on the same node can read and write each other's storage
as plain NumPy views (a memory copy, no MPI call). A second window over the same memory spans the
whole team for remote units. The team window is locked once (``MPI_Win_lock_all`` with
``MPI_MODE_NOCHECK``) for its whole lifetime, as DASH does; completion is ``Flush``.

:func:`live_segments` counts segments not yet freed, so tests can check that nothing leaks.
"""
from __future__ import annotations

import atexit
import collections
import math
import os

import numpy as np
from mpi4py import MPI

from . import lifetime
# (imported first, so runtime.team's exit handler, which frees the node communicators, runs after
# this module's, which frees the windows made on them)
from ..runtime import team as _team_module  # noqa: F401

__all__ = ["Segment", "acquire", "live_segments", "pooled_segments", "drain_pool"]

# Every segment not yet freed, in allocation order (the same order on every rank, since allocation
# is collective). Strong references: a dropped array keeps its memory until free() or exit.
_live: "list[Segment]" = []


# Freed segments kept for reuse, keyed by what every rank of the team agrees on (the team object,
# the array's global geometry, dtype and shm choice): creating windows is the most expensive part
# of making an array (collective, tens of ms), and codes allocate temporaries of the same shapes
# over and over. Every rank makes the same hit/miss/evict decisions because keys and the nominal
# byte counts are global properties, and acquire/release happen in the same (collective) order.
_pool: "collections.OrderedDict[tuple, list[Segment]]" = collections.OrderedDict()
_pool_bytes = 0
POOL_LIMIT = int(float(os.environ.get("HPCSUITE_PGAS_POOL_MB", "256")) * 2**20)


def acquire(team, shape, dtype, shm=None, key=None, nominal_bytes: int = 0) -> "Segment":
    """A segment for an array: a pooled one with the same ``key`` if any, else a new one (before
    which dropped arrays are released by agreement, see :func:`pgas.lifetime.new_windows
    <hpcsuite.pgas.lifetime.new_windows>`). Collective (identical ``key`` and ``nominal_bytes``
    on every rank)."""
    global _pool_bytes
    shm = _shm_default() if shm is None else bool(shm)
    full_key = None if key is None else (team, key, np.dtype(dtype).str, shm)
    pooled = _pool.get(full_key) if full_key is not None else None
    if not pooled:
        # new windows (collective anyway): first release what every rank has dropped, which may
        # put a segment of this layout into the pool
        lifetime.new_windows(team)
        pooled = _pool.get(full_key) if full_key is not None else None
    if pooled:
        seg = pooled.pop()
        if not pooled:
            del _pool[full_key]
        _pool_bytes -= seg.nominal_bytes
        seg.freed = False
        _live.append(seg)
        return seg
    seg = Segment(team, shape, dtype, shm)
    seg.pool_key, seg.nominal_bytes = full_key, nominal_bytes
    return seg


def pooled_segments() -> int:
    """Number of freed segments kept for reuse on this rank."""
    return sum(len(v) for v in _pool.values())


def drain_pool() -> None:
    """Free every pooled segment. Collective over the teams of the pooled segments."""
    global _pool_bytes
    while _pool:
        _, segs = _pool.popitem(last=False)
        for seg in segs:
            seg.destroy()
    _pool_bytes = 0


def _shm_default() -> bool:
    return os.environ.get("HPCSUITE_PGAS_SHM", "1") not in ("0", "false", "no")


def live_segments() -> int:
    """Number of :class:`Segment` objects allocated and not yet freed on this rank. Local."""
    return len(_live)


def node_comm(team) -> MPI.Comm:
    """The team's shared-memory node communicator, split once per team and reused by every
    segment (the split is the most expensive part of allocating an array). Collective on the first
    call for a team, local afterwards.

    Internal to pgas (segments, and ``array`` for a rank's index on its node): the team's
    ``node_team()``, kept with the team (``Team.derived``), so it is freed with the team or at exit,
    after the segments that use it.

    Parameters
    ----------
    team : Team
        The units of the allocation.

    Returns
    -------
    mpi4py.MPI.Comm
        The ranks of ``team`` on this rank's node (ranked as in ``team``).
    """
    return team.node_team().comm


class Segment:
    """One unit's block of a team-wide globally addressable allocation. Collective.

    Parameters
    ----------
    team : Team
        The units sharing the allocation.
    shape : tuple of int
        This unit's storage shape (may differ between units, may be empty).
    dtype : numpy dtype
        Element type; must have a fixed size.
    shm : bool, optional
        Map same-node peers' storage directly (default: ``$HPCSUITE_PGAS_SHM``, else true).
        With ``False`` every access to another unit goes through MPI RMA, as across nodes.

    Attributes
    ----------
    array : ndarray
        This unit's storage (writable, C-contiguous).
    win : MPI.Win
        The team-wide window (displacement unit = element size), locked for its lifetime.
    node_rank_of : dict
        Team rank -> rank on this node, for the units whose storage this unit can map directly.
    """

    def __init__(self, team, shape, dtype, shm: bool | None = None):
        self.shm = _shm_default() if shm is None else bool(shm)
        self.pool_key, self.nominal_bytes = None, 0
        self.team = team
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(n) for n in shape)
        self.itemsize = self.dtype.itemsize
        nbytes = math.prod(self.shape) * self.itemsize
        comm = team.comm
        self.node_comm = node_comm(team)
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")   # each unit's block on its own pages
        try:
            self.shm_win = MPI.Win.Allocate_shared(max(nbytes, 0), self.itemsize, info=info,
                                                   comm=self.node_comm)
        finally:
            info.Free()
        mem = self.shm_win.tomemory()
        self.array = np.frombuffer(mem, dtype=self.dtype, count=math.prod(self.shape)).reshape(self.shape) \
            if nbytes else np.empty(self.shape, dtype=self.dtype)
        if comm.Get_size() == 1:
            # one unit: the shared window is the RMA window (Open MPI 4.1 cannot MPI_Win_create on
            # one process without UCX: osc/rdma needs a BTL with RDMA, and 'self' has none)
            self.win = self.shm_win
        else:
            self.win = MPI.Win.Create(mem if nbytes else None, self.itemsize, comm=comm)
            self.win.Lock_all(MPI.MODE_NOCHECK)
        self.shm_win.Lock_all(MPI.MODE_NOCHECK)
        # which team ranks live on this node, and their node ranks (one allgather on the node)
        team_ranks = self.node_comm.allgather(team.rank)
        self.node_rank_of = {r: i for i, r in enumerate(team_ranks)}
        self._peer_views: dict[int, np.ndarray] = {team.rank: self.array}
        self._peer_shapes: dict[int, tuple] = {}
        self.freed = False
        _live.append(self)

    def peer_view(self, unit: int, shape) -> np.ndarray | None:
        """A NumPy view of ``unit``'s storage when it is on this node, else ``None``. Local."""
        v = self._peer_views.get(unit)
        if v is not None:
            return v
        nr = self.node_rank_of.get(unit) if self.shm else None
        if nr is None:
            return None
        count = math.prod(shape)
        if count == 0:
            v = np.empty(shape, dtype=self.dtype)
        else:
            mem, _ = self.shm_win.Shared_query(nr)
            v = np.frombuffer(mem, dtype=self.dtype, count=count).reshape(shape)
        self._peer_views[unit] = v
        return v

    def flush(self, unit: int | None = None) -> None:
        """Complete outstanding RMA to ``unit`` (all units when ``None``) and order shared-memory
        accesses. Local (one-sided)."""
        if unit is None:
            self.win.Flush_all()
        else:
            self.win.Flush(unit)
        self.shm_win.Sync()
        if self.win is not self.shm_win:
            self.win.Sync()

    def free(self) -> None:
        """Give the segment back: into the reuse pool when it has a pool key and fits the pool's
        budget (``$HPCSUITE_PGAS_POOL_MB``, default 256 per rank), else release its windows.
        Collective; idempotent."""
        global _pool_bytes
        if self.freed:
            return
        self.freed = True
        _live.remove(self)
        if self.pool_key is None or self.nominal_bytes > POOL_LIMIT:
            self.destroy()
            return
        _pool.setdefault(self.pool_key, []).append(self)
        _pool.move_to_end(self.pool_key)
        _pool_bytes += self.nominal_bytes
        while _pool_bytes > POOL_LIMIT:               # evict the least recently pooled first
            key, segs = next(iter(_pool.items()))
            old = segs.pop(0)
            if not segs:
                del _pool[key]
            _pool_bytes -= old.nominal_bytes
            old.destroy()

    def destroy(self) -> None:
        """Release both windows. Collective."""
        self._peer_views.clear()
        self.array = None
        if self.win is not self.shm_win:
            self.win.Unlock_all()
            self.win.Free()
        self.shm_win.Unlock_all()
        self.shm_win.Free()


@atexit.register
def _free_at_exit() -> None:
    # MPI_Finalize (run by mpi4py at exit, after this handler) crashes in UCX if windows are still
    # allocated. At a normal exit every rank holds the same live segments (allocation and free()
    # are collective), so freeing them here, oldest first, is a matching sequence of collectives.
    if MPI.Is_finalized():
        return
    for s in list(_live):
        s.pool_key = None
        s.free()
    drain_pool()
    # the node communicators go after this, with their teams (runtime.team's exit handler)

"""MPI-parallel staging: every rank of a team moves its share of the files. Collective.

Rank 0 lists the files (or objects), the list is broadcast, and the files are dealt out by size
(largest first, each to the rank with the least bytes so far), so every rank streams about the same
amount through its own connection to the store. Failures are made collective: if any rank fails,
every rank raises the same :class:`StagingError` (no rank is left waiting).
"""
from __future__ import annotations

import heapq
import os
from pathlib import Path

from hpcsuite.runtime import InputError

from .store import StagingError, Store, plan_stage_in, plan_stage_out

__all__ = ["stage_in", "stage_out", "deal_by_size"]


def deal_by_size(sizes: list[int], parts: int) -> list[int]:
    """Owner rank of each item: largest first, each to the least-loaded part (ties: lowest rank)."""
    heap = [(0, r) for r in range(parts)]
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, r = heapq.heappop(heap)
        owner[i] = r
        heapq.heappush(heap, (load + sizes[i], r))
    return owner


def _collective(team, fn):
    """Run ``fn`` on every rank; raise the first failing rank's error on all ranks."""
    try:
        result, err = fn(), None
    except (StagingError, InputError, OSError) as exc:
        result, err = None, exc
    errs = team.allgather(None if err is None else (type(err).__name__, str(err)))
    first = next((e for e in errs if e is not None), None)
    if first is not None:
        kind, msg = first
        raise InputError(msg) if kind == "InputError" else StagingError(msg)
    return result


def stage_in(store: Store, path, team, name: str | None = None) -> list[str]:
    """Copy a file or a directory tree into ``store``, each rank moving its share. Collective.

    Every rank passes its own ``store`` (its own connection to the same store) and the same ``path``
    and ``name`` (see :meth:`Store.stage_in`); ``path`` must be readable on every rank (a shared
    filesystem, or node-local input on one node). Returns every object name, on every rank.
    """
    def plan():
        pairs = plan_stage_in(path, name) if team.rank == 0 else None
        return [(str(p), n, os.path.getsize(p)) for p, n in pairs] if pairs is not None else None
    plan_list = team.bcast(_collective(team, plan))
    owner = deal_by_size([s for _, _, s in plan_list], team.size)

    def move():
        for (src, obj, _), r in zip(plan_list, owner):
            if r == team.rank:
                store.put_file(obj, src)
    _collective(team, move)
    return [obj for _, obj, _ in plan_list]


def stage_out(store: Store, name: str, dest, team) -> list[Path]:
    """Copy object ``name`` (or every object below ``name/``) to ``dest``, each rank moving its
    share, checksums verified. Collective. ``dest`` must be on a filesystem every rank sees.
    Returns the destination paths, on every rank."""
    def plan():
        if team.rank != 0:
            return None
        return [(obj, str(p), store.info(obj).size) for obj, p in plan_stage_out(store, name, dest)]
    plan_list = team.bcast(_collective(team, plan))
    owner = deal_by_size([s for _, _, s in plan_list], team.size)

    def move():
        for (obj, dst, _), r in zip(plan_list, owner):
            if r == team.rank:
                store.get_file(obj, dst)
    _collective(team, move)
    return [Path(d) for _, d, _ in plan_list]

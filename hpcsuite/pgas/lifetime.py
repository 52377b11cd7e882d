"""Deferred, agreed frees of the DistArrays that go away without ``free()``.

Freeing a DistArray is collective (its window, or its place in the reuse pool, must change at the
same point on every rank), so it must never happen inside ``__del__``: CPython calls ``__del__``
when the last reference goes, and the cyclic garbage collector runs at moments that differ between
ranks (it is triggered by allocation counts). A free there could start a window free on one rank
while another is in a different collective (a hang), or leave the pools of the ranks different
(a later pooled/new allocation would then not match).

So ``__del__`` only hands the array's resources to :func:`defer`, which queues them per team.
Queued resources are released at *collective call points* of their team, where every rank is
known to be at the same place of the program:

* :func:`drain` (at the start of every DistArray creation and explicit ``free()`` on the team):
  releases, in creation order (a per-team sequence number every array gets at creation, the same
  on every rank), the entries that were queued by reference counting in the main thread, outside
  a garbage-collector pass. In SPMD code such drops happen at the same program point on every
  rank, as before; only the release is moved to the next collective point. No communication.
* :func:`agree`: entries queued during a garbage-collector pass (or from another thread) are
  released only once every rank has queued them: one ``allgather`` of the queued sequence numbers,
  then the numbers queued on every rank are released in increasing order; the others stay queued.
  It runs from :func:`collect` (public as ``pgas.collect``), automatically at the first and then
  every :data:`AGREE_EVERY`-th allocation of new windows on the team (a pool miss: the moment
  memory is needed; the miss count is the same on every rank), and at exit every segment still
  live is freed in allocation order (``pgas.memory``).

The cost on the common path is a dictionary look-up per array creation; the ``allgather`` comes
only with the (already collective, tens of ms) creation of new windows, one in
:data:`AGREE_EVERY`.
"""
from __future__ import annotations

import atexit
import gc
import threading
import weakref

__all__ = ["next_id", "defer", "drain", "agree", "new_windows", "collect", "pending", "AGREE_EVERY"]

#: automatic agreement on collector-queued arrays at every this many new-window allocations
AGREE_EVERY = 8

_next_id: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # team -> next sequence id
_queues: dict = {}          # team -> list of _Entry, in queue order
_misses: dict = {}          # team -> new-window allocations since the last agreement
_in_gc = 0                  # > 0 while the cyclic garbage collector runs
_main = threading.main_thread()


def _gc_phase(phase, info) -> None:
    global _in_gc
    _in_gc = _in_gc + 1 if phase == "start" else max(_in_gc - 1, 0)


gc.callbacks.append(_gc_phase)


class _Entry:
    __slots__ = ("seq", "release", "certain")

    def __init__(self, seq, release, certain):
        self.seq, self.release, self.certain = seq, release, certain


def next_id(team) -> int:
    """The next sequence number of an array on ``team`` (call once per creation, which is
    collective: the numbers are the same on every rank). Local."""
    n = _next_id.get(team, 0)
    _next_id[team] = n + 1
    return n


def defer(team, seq: int, release) -> None:
    """Queue ``release`` (a callable that frees an array's resources, collective) of the array
    with sequence number ``seq``. Local, no communication: safe inside ``__del__``."""
    certain = _in_gc == 0 and threading.current_thread() is _main
    _queues.setdefault(team, []).append(_Entry(seq, release, certain))


def pending(team=None) -> int:
    """Arrays queued and not yet released (on ``team``, or on all teams). Local."""
    if team is not None:
        return len(_queues.get(team, ()))
    return sum(len(q) for q in _queues.values())


def _release(entries) -> None:
    for e in sorted(entries, key=lambda e: e.seq):
        e.release()


def drain(team) -> None:
    """Release ``team``'s entries queued by reference counting (see the module notes). Call only
    where every rank of ``team`` is at the same collective point. Collective (communicates only
    when a released segment's windows are destroyed)."""
    q = _queues.get(team)
    if not q or not any(e.certain for e in q):
        return
    was = gc.isenabled()
    gc.disable()                    # no collector pass may queue into the list being split
    try:
        while True:
            certain = [e for e in q if e.certain]
            if not certain:
                break
            q[:] = [e for e in q if not e.certain]
            _release(certain)       # (releasing may drop more arrays: loop)
    finally:
        if was:
            gc.enable()


def agree(team, observed: bool = True) -> int:
    """Release ``team``'s entries queued on every rank, including those the garbage collector
    queued on some ranks only: one ``allgather`` of the queued sequence numbers (through the
    team's communication hooks, or, with ``observed=False``, on its communicator directly, as
    part of a window allocation whose other calls are not observed either). Collective.
    Returns how many were released here."""
    drain(team)
    q = _queues.get(team, [])
    mine = sorted(e.seq for e in q)
    everyone = team.allgather(mine) if observed else team.comm.allgather(mine)
    common = set(everyone[0]).intersection(*everyone[1:])
    _misses[team] = 0
    if not common:
        return 0
    was = gc.isenabled()
    gc.disable()
    try:
        go = [e for e in q if e.seq in common]
        q[:] = [e for e in q if e.seq not in common]
        _release(go)
    finally:
        if was:
            gc.enable()
    drain(team)
    return len(go)


def new_windows(team) -> None:
    """Called before allocating new windows on ``team`` (a pool miss, the same on every rank):
    agree on the first and then every :data:`AGREE_EVERY`-th such call. Collective."""
    n = _misses.get(team)
    if n is None or n + 1 >= AGREE_EVERY:
        agree(team, observed=False)
    else:
        _misses[team] = n + 1


def collect(team=None) -> int:
    """Release every DistArray result that went out of scope on every rank of ``team`` (default:
    the world), also those the cyclic garbage collector found. Collective over ``team``.

    Results of the NumPy protocols (``a * 2 + b``, ``a.sum(axis=0)``, ...) are released at the
    next array creation or ``free()`` on their team when the last reference goes (by reference
    counting), and collector-found ones at a later agreement; call this (after ``gc.collect()``
    if cycles may hold arrays) to release everything that can be released now. Returns the number
    released by agreement.
    """
    if team is None:
        from ..runtime import Team
        team = Team.world()
    return agree(team)


@atexit.register
def _forget_at_exit() -> None:
    # pgas.memory frees every live segment at exit in allocation order (the same on every rank,
    # queued ones included); the queues only have to let go of them (this handler runs first:
    # registered later)
    _queues.clear()

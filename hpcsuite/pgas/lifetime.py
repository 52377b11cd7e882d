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

**Views that outlive their array.** A released segment goes into the reuse pool, and the next
array of its layout gets the same memory. A NumPy view of a dropped result kept by the caller
(``v = (a * 2).local``, or any slice of it) would then alias that new array. So before an entry is
released, its storage is checked for references from outside the segment and the array's own
transfer plans (reference counts of the storage array and of its base, against the references
found by walking the segment, its halo and plans: no communication): an entry whose storage is
still viewed is *parked* (neither pooled nor freed: the view stays valid and private) and released
at the first collective point of its team where no view is left: a view keeps its array's memory,
as a NumPy view keeps its base. As releases, this needs views of a result held and dropped alike
on every rank (the rule for results themselves, and for the reuse of temporaries): a view kept
on some ranks only parks the entry there only, and the pools of the ranks then differ, as with a
result kept on some ranks only (a later pool hit on some ranks and a miss on others would hang).
:func:`parked` counts the parked entries.
"""
from __future__ import annotations

import atexit
import gc
import sys
import threading
import weakref

import numpy as np

__all__ = ["next_id", "defer", "drain", "agree", "new_windows", "collect", "pending", "parked",
           "viewed", "AGREE_EVERY"]

#: automatic agreement on collector-queued arrays at every this many new-window allocations
AGREE_EVERY = 8

_next_id: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # team -> next sequence id
_queues: dict = {}          # team -> list of _Entry, in queue order
_misses: dict = {}          # team -> new-window allocations since the last agreement
_parked: dict = {}          # team -> list of _Entry whose storage was still viewed at release
_in_gc = 0                  # > 0 while the cyclic garbage collector runs
_main = threading.main_thread()


def _gc_phase(phase, info) -> None:
    global _in_gc
    _in_gc = _in_gc + 1 if phase == "start" else max(_in_gc - 1, 0)


gc.callbacks.append(_gc_phase)


class _Entry:
    __slots__ = ("seq", "release", "certain", "segment")

    def __init__(self, seq, release, certain, segment=None):
        self.seq, self.release, self.certain, self.segment = seq, release, certain, segment


def next_id(team) -> int:
    """The next sequence number of an array on ``team`` (call once per creation, which is
    collective: the numbers are the same on every rank). Local."""
    n = _next_id.get(team, 0)
    _next_id[team] = n + 1
    return n


def defer(team, seq: int, release, segment=None) -> None:
    """Queue ``release`` (a callable that frees an array's resources, collective) of the array
    with sequence number ``seq``; ``segment`` is the array's host storage (a ``pgas.memory``
    ``Segment``, for the view check; found among ``release``'s closure when not given). Local, no
    communication: safe inside ``__del__``."""
    certain = _in_gc == 0 and threading.current_thread() is _main
    _queues.setdefault(team, []).append(_Entry(seq, release, certain, segment))


def pending(team=None) -> int:
    """Arrays queued and not yet released (on ``team``, or on all teams). Local."""
    if team is not None:
        return len(_queues.get(team, ()))
    return sum(len(q) for q in _queues.values())


def parked(team=None) -> int:
    """Released arrays whose storage is still viewed from outside (see the module notes), kept
    out of the pool until the views go (on ``team``, or on all teams). Local."""
    if team is not None:
        return len(_parked.get(team, ()))
    return sum(len(q) for q in _parked.values())


def _roots(e: _Entry) -> list:
    """What ``e``'s release owns: the segment, halo and plans in its closure (or ``e.segment``)."""
    cells = getattr(e.release, "__closure__", None) or ()
    roots = [c.cell_contents for c in cells]
    if e.segment is not None and not any(r is e.segment for r in roots):
        roots.append(e.segment)
    return roots


def _segment(roots):
    for r in roots:
        if isinstance(getattr(r, "array", None), np.ndarray) and hasattr(r, "pool_key"):
            return r
    return None


_CONTAINERS = (dict, list, tuple, set, frozenset)
_OWN: dict = {}      # id(segment) -> (weak reference to it, id of its storage, counts)


def _walked(r) -> bool:
    # containers and pgas's own objects (segment, halo, transfer plans); not arrays, teams,
    # communicators or anything else
    return isinstance(r, _CONTAINERS) or type(r).__module__.startswith("hpcsuite.pgas")


def _count_inside(roots, targets, limit: int = 400) -> list:
    """How many references to each of ``targets`` the objects reachable from ``roots`` hold
    (containers and pgas objects walked, at most ``limit`` of them; arrays not entered)."""
    counts = [0] * len(targets)
    seen = {id(r) for r in roots}
    todo = list(roots)
    while todo and limit > 0:
        o = todo.pop()
        limit -= 1
        for r in gc.get_referents(o):
            hit = False
            for k, t in enumerate(targets):
                if r is t:
                    counts[k] += 1
                    hit = True
            if hit or id(r) in seen or not _walked(r):
                continue
            seen.add(id(r))
            todo.append(r)
    return counts


def viewed(roots) -> bool:
    """Whether the storage of the segment among ``roots`` (a released array's segment, halo and
    plans) is referenced from anywhere else: a view of it kept by the caller. Local, no
    communication (reference counts)."""
    seg = _segment(roots)
    if seg is None:
        return False
    st = seg.array
    base = st.base if isinstance(st.base, np.ndarray) else None
    if st.size == 0:
        return False
    targets = (st, base) if base is not None else (st,)
    # the segment's own references to its storage (the same every time it is released: cached)
    own = _OWN.get(id(seg))
    if own is None or own[0]() is not seg or own[1] != id(st):
        if len(_OWN) > 4096:
            _OWN.clear()
        own = _OWN[id(seg)] = (weakref.ref(seg), id(st), _count_inside([seg], targets))
    inside = list(own[2])
    rest = [r for r in roots if r is not seg and r is not None and not (isinstance(r, list) and not r)]
    if rest:                                # halo, transfer plans
        for k, c in enumerate(_count_inside(rest, targets)):
            inside[k] += c
    del targets                             # (it holds both)
    # getrefcount counts its argument and this frame's local name once each; the base is also
    # held by the storage array itself
    if sys.getrefcount(st) - 2 > inside[0]:
        return True
    return base is not None and sys.getrefcount(base) - 2 > inside[1] + 1


def _release(team, entries) -> None:
    for e in sorted(entries, key=lambda e: e.seq):
        if viewed(_roots(e)):
            _parked.setdefault(team, []).append(e)
        else:
            e.release()


def _unpark(team) -> None:
    """Release the parked entries of ``team`` that nothing views any more (seq order)."""
    q = _parked.get(team)
    if not q:
        return
    free = [e for e in q if not viewed(_roots(e))]
    if free:
        q[:] = [e for e in q if e not in free]
        for e in sorted(free, key=lambda e: e.seq):
            e.release()


def drain(team) -> None:
    """Release ``team``'s entries queued by reference counting (see the module notes). Call only
    where every rank of ``team`` is at the same collective point. Collective (communicates only
    when a released segment's windows are destroyed)."""
    if _parked.get(team):
        _unpark(team)
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
            _release(team, certain)       # (releasing may drop more arrays: loop)
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
        _release(team, go)
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
    _parked.clear()

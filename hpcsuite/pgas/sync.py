"""Synchronisation on distributed arrays: one-sided atomics on elements and a team-wide mutex.

:class:`Atomic` refers to one element of a :class:`~hpcsuite.pgas.DistArray` and updates it with
MPI-3 atomics (``MPI_Fetch_and_op``, ``MPI_Compare_and_swap``, ``MPI_Accumulate``) on the array's
team window, as DASH's ``dash::Atomic``. Operations are one-sided: the owner makes no matching call.

:class:`Mutex` is a ticket lock over the ranks of a team, built on the same atomics on a small window
of its own; it serves waiters in the order they asked (FIFO).

Examples
--------
With ``mpiexec -n 4``::

    >>> hits = pgas.zeros(1, dtype=np.int64)
    >>> pgas.Atomic(hits, 0).fetch_add(1)       # each rank: its old value, one of 0..3
    >>> m = pgas.Mutex()                         # collective
    >>> with m:
    ...     a[0] = a[0] + 1                      # plain get and put, never interleaved
    >>> m.free()                                 # collective

Progress: MPICH 4.0 with UCX carries these atomics out as active messages, handled by the target
process during its own MPI calls (measured: while the target sleeps outside MPI, atomics on its
memory and waiting for a mutex whose counters it holds (team rank 0) stall until it calls MPI
again). Ranks that wait or compute in MPI are fine; a rank that computes for long without MPI calls
delays the others' atomics on its elements (``MPIR_CVAR_ASYNC_PROGRESS=1`` adds a progress thread,
at the cost of a core).
"""
from __future__ import annotations

import atexit
import functools
import operator
import os
import time

import numpy as np
from mpi4py import MPI

from ..runtime import Team
from .array import DistArray, mpi_type

__all__ = ["Atomic", "Mutex", "live_mutexes", "accumulate"]

# integer types of the same size, for compare-and-swap on floats by bit pattern (MPI allows CAS on
# integer types only)
_SAME_SIZE_INT = {4: np.dtype(np.int32), 8: np.dtype(np.int64)}


@functools.lru_cache(maxsize=None)
def _atomic_dtype(dtype: np.dtype) -> MPI.Datatype:
    """The predefined MPI type for an atomic element type, or ``ValueError`` (cached per dtype)."""
    if dtype.kind not in "iuf" or not dtype.isnative:
        raise ValueError(f"atomics need an integer or floating-point dtype in native byte order, "
                         f"got {dtype}")
    try:
        t = mpi_type(dtype)
    except ValueError:
        raise ValueError(f"atomics need a dtype with an MPI type, got {dtype}") from None
    if t.Get_size() != dtype.itemsize or not t.is_predefined:
        raise ValueError(f"atomics need a dtype with a predefined MPI type, got {dtype}")
    return t


def _full_index(index, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Non-negative global index tuple for ``index`` (negative entries count from the end)."""
    if type(index) is int and len(shape) == 1 and -shape[0] <= index < shape[0]:
        return (index + shape[0] if index < 0 else index,)       # the common 1-D case, fast
    idx = (index,) if not isinstance(index, tuple) else index
    try:
        if any(isinstance(i, (bool, np.bool_)) for i in idx):
            raise TypeError
        idx = tuple(operator.index(i) for i in idx)
    except TypeError:
        raise IndexError(f"an Atomic needs integer indices, got {index!r} for global shape {shape}") from None
    if len(idx) != len(shape) or any(not -n <= i < n for i, n in zip(idx, shape)):
        raise IndexError(f"index {index!r} is out of bounds for global shape {shape} (an Atomic needs "
                         f"one integer per dimension)")
    return tuple(i + n if i < 0 else i for i, n in zip(idx, shape))


class Atomic:
    """A reference to one element of a :class:`~hpcsuite.pgas.DistArray`, updated atomically.

    Creating one is local (no communication). Every operation is one-sided and non-collective: it
    goes through the array's team window as an MPI-3 atomic and returns when complete at the owner
    (``MPI_Win_flush``), so operations from all ranks on the same element are atomic with respect to
    each other. They never take the shared-memory shortcut that ``a[i]`` / ``a[i] = v`` use.

    Parameters
    ----------
    array : DistArray
        The array; its dtype must be an integer or floating-point type with an MPI type.
    index : int or tuple of int
        The element's global index (one integer per dimension; negative counts from the end).

    Raises
    ------
    IndexError
        On the calling rank, for an index outside the global shape (the message names both).
    ValueError
        For an element type without MPI atomics (bool, complex, structured, non-native byte order).
    RuntimeError
        When the array has been freed (also from each operation).

    Notes
    -----
    Plain reads and writes of the same element (``a[i]``, ``a.local``) are not atomic with respect
    to these operations; separate the two kinds with :meth:`DistArray.sync`. On GPU arrays atomics
    act on the host copy (see :meth:`DistArray.update_host` / :meth:`DistArray.update_device`).
    Floating-point :meth:`compare_and_swap` compares bit patterns through a same-size integer type
    (so ``-0.0 != 0.0`` and a NaN matches itself); MPICH serialises all atomics on a target window,
    so it is atomic with :meth:`fetch_add` as well (the MPI standard promises atomicity only between
    operations of one datatype).

    Examples
    --------
    >>> c = pgas.Atomic(counter, (0, 3))
    >>> old = c.fetch_add(1)
    >>> c.compare_and_swap(-1, team.rank)         # the old value; the swap happened if it was -1
    """

    def __init__(self, array: DistArray, index):
        if not isinstance(array, DistArray):
            raise ValueError(f"Atomic needs a DistArray, got {type(array).__name__}")
        array.check_alive()
        self._type = _atomic_dtype(array.dtype)
        self.array = array
        self.dtype = array.dtype
        self.index = _full_index(index, array.shape)
        # the halo (and tiles) are accounted for by the array's address arithmetic
        self.unit, self.disp = array.element_address(self.index)
        self._val = np.empty(1, dtype=self.dtype)       # reused operand and result buffers
        self._res = np.empty(1, dtype=self.dtype)

    def __repr__(self) -> str:
        return f"Atomic(index={self.index}, unit={self.unit}, dtype={self.dtype})"

    # ------------------------------------------------------------------ helpers
    def _win(self) -> MPI.Win:
        self.array.check_alive()
        return self.array.segment.win

    def _value(self, v, what: str) -> np.ndarray:
        """``v`` as a one-element buffer of the element type (no silent float -> int truncation)."""
        if type(v) is int and self.dtype.kind in "iu" or type(v) in (int, float) and self.dtype.kind == "f":
            self._val[0] = v                      # the common case, without building arrays
            return self._val
        x = np.asarray(v)
        if x.shape != () or x.dtype.kind not in "biuf" or (self.dtype.kind in "iu" and x.dtype.kind == "f"):
            raise ValueError(f"{what}: need a real {'integer' if self.dtype.kind in 'iu' else 'number'} "
                             f"for an element of type {self.dtype}, got {v!r}")
        return np.array([v], dtype=self.dtype)

    def _fetch_op(self, value: np.ndarray, op: MPI.Op):
        win = self._win()
        win.Fetch_and_op([value, self._type], [self._res, self._type], self.unit, self.disp, op)
        win.Flush(self.unit)
        return self._res[0]

    # ------------------------------------------------------------------ operations (one-sided)
    def fetch_add(self, value):
        """Add ``value`` to the element and return its previous value. One-sided, atomic."""
        return self._fetch_op(self._value(value, "fetch_add"), MPI.SUM)

    def load(self):
        """The element's current value (``MPI_Fetch_and_op`` with ``MPI_NO_OP``). One-sided, atomic."""
        return self._fetch_op(np.zeros(1, dtype=self.dtype), MPI.NO_OP)

    def exchange(self, value):
        """Replace the element by ``value`` and return its previous value. One-sided, atomic."""
        return self._fetch_op(self._value(value, "exchange"), MPI.REPLACE)

    def store(self, value) -> None:
        """Set the element to ``value`` (``MPI_Accumulate`` with ``MPI_REPLACE``); returns when it is
        in the owner's memory. One-sided, atomic."""
        v = self._value(value, "store")
        win = self._win()
        win.Accumulate([v, self._type], self.unit, (self.disp, 1, self._type), MPI.REPLACE)
        win.Flush(self.unit)

    def compare_and_swap(self, expected, new):
        """Set the element to ``new`` if it equals ``expected``; return its previous value (the swap
        happened exactly when that equals ``expected``). One-sided, atomic.

        Floating-point elements are compared by bit pattern (see the class notes).
        """
        cmp_ = self._value(expected, "compare_and_swap").copy()   # _value may reuse one buffer
        new_ = self._value(new, "compare_and_swap").copy()
        if self.dtype.kind == "f":
            itype = _SAME_SIZE_INT.get(self.dtype.itemsize)
            if itype is None:
                raise ValueError(f"compare_and_swap: no integer type as wide as {self.dtype}")
            cmp_, new_, t = cmp_.view(itype), new_.view(itype), mpi_type(itype)
        else:
            t = self._type
        win = self._win()
        result = np.empty(1, dtype=new_.dtype)
        win.Compare_and_swap([new_, t], [cmp_, t], [result, t], self.unit, self.disp)
        win.Flush(self.unit)
        return result.view(self.dtype)[0]


def accumulate(array: DistArray, indices, values, op: str = "sum") -> None:
    """Atomically combine ``values`` into the elements at ``indices`` (GUPS-style updates in bulk).

    One-sided and non-collective: the updates are grouped by owner and each owner receives one
    ``MPI_Accumulate`` with an indexed datatype, instead of one atomic per element; the call
    returns when all are complete at the owners. Each element update is atomic with respect to
    other ``accumulate`` calls and :class:`Atomic` operations (MPI accumulate semantics), so
    concurrent updates of the same element from several ranks are never lost. Repeated indices
    in one call are combined first (``np.add.at``-style).

    Parameters
    ----------
    array : DistArray
        A 1-D or N-D array of an integer or floating-point dtype.
    indices : array of int, shape (k,) or (k, ndim)
        Global indices (flat for 1-D arrays, one row per element otherwise).
    values : scalar or array of shape (k,)
    op : {"sum", "max", "min", "replace"}
    """
    ops = {"sum": (MPI.SUM, np.add), "max": (MPI.MAX, np.maximum), "min": (MPI.MIN, np.minimum),
           "replace": (MPI.REPLACE, None)}
    if op not in ops:
        raise ValueError(f"accumulate: op must be one of {', '.join(map(repr, ops))}, got {op!r}")
    if not isinstance(array, DistArray):
        raise ValueError(f"accumulate needs a DistArray, got {type(array).__name__}")
    array.check_alive()
    mtype = _atomic_dtype(array.dtype)
    idx = np.asarray(indices, dtype=np.int64)
    if array.ndim == 1 and idx.ndim == 1:
        idx = idx[:, None]
    if idx.ndim != 2 or idx.shape[1] != array.ndim:
        raise ValueError(f"accumulate: indices must have shape (k,) or (k, {array.ndim}), got {idx.shape}")
    shape = np.asarray(array.shape)
    if idx.size and (np.any(idx < 0) or np.any(idx >= shape)):
        bad = idx[np.flatnonzero(np.any((idx < 0) | (idx >= shape), axis=1))[0]]
        raise IndexError(f"index {tuple(int(i) for i in bad)} is out of bounds for global shape {array.shape}")
    vals = np.broadcast_to(np.asarray(values, dtype=array.dtype), (idx.shape[0],))
    mpi_op, ufunc = ops[op]
    # owner and displacement of every element, vectorised over the whole batch
    p = array.pattern
    unit = np.zeros(len(idx), dtype=np.int64)
    unit += p.unit_of([m.owner(idx[:, d]) for d, m in enumerate(p.maps)])
    lidx = [m.local(idx[:, d]) for d, m in enumerate(p.maps)]
    win = array.segment.win
    order = np.argsort(unit, kind="stable")
    cuts = np.flatnonzero(np.diff(unit[order])) + 1
    for group in np.split(order, cuts) if len(order) else []:
        u = int(unit[group[0]])
        pos = p.storage_index([l[group] for l in lidx]) if p.tiled else [l[group] for l in lidx]
        pos = [q + (array.halo_width[k] if k < array.ndim else 0) for k, q in enumerate(pos)]
        disp = np.ravel_multi_index(pos, array.padded_storage_shape(u)).astype(np.int64)
        # combine repeated targets locally, then one accumulate with an indexed type per owner
        uniq, inv = np.unique(disp, return_inverse=True)
        if ufunc is None:
            combined = np.empty(len(uniq), dtype=array.dtype)
            combined[inv] = vals[group]             # the last value for a repeated index wins
        else:
            combined = np.full(len(uniq), ufunc.identity if ufunc.identity is not None else 0,
                               dtype=array.dtype)
            if op in ("max", "min"):
                combined[...] = vals[group][np.unique(inv, return_index=True)[1]]
            ufunc.at(combined, inv, vals[group])
        dtype = mtype.Create_indexed_block(1, uniq.tolist()).Commit()
        win.Accumulate([combined, mtype], u, (0, 1, dtype), mpi_op)
        win.Flush(u)
        dtype.Free()


# ---------------------------------------------------------------------- Mutex
# Mutexes not yet freed (creation is collective, so every rank lists the same ones in the same order).
_live: "list[Mutex]" = []

_NEXT, _SERVING = 0, 1          # the two counters on team rank 0: next ticket, ticket being served


def live_mutexes() -> int:
    """Number of :class:`Mutex` objects created and not yet freed on this rank. Local."""
    return len(_live)


class Mutex:
    """Mutual exclusion across the ranks of a team: a ticket lock on MPI-3 atomics.

    Creating one is collective over the team; :meth:`lock`, :meth:`unlock` and :meth:`try_lock` are
    one-sided (only the calling rank takes part). Use it as a context manager::

        with mutex:
            a[0] = a[0] + 1

    Parameters
    ----------
    team : Team, optional
        The ranks that share the lock (default: the world).

    Notes
    -----
    Fairness: FIFO. :meth:`lock` draws a ticket with one ``MPI_Fetch_and_op`` on team rank 0 and
    waits until the "now serving" counter reaches it, so ranks get the lock in the order their
    tickets were drawn and none starves. :meth:`try_lock` never queues: it succeeds only when nobody
    holds or waits for the lock. Waiting polls the counter with ``MPI_NO_OP`` fetches: the next in
    line spins for a few polls (a hand-over in microseconds), then every waiter yields its core
    between polls, then naps for a time proportional to its place in the queue (doubling while the
    queue does not move, at most 1 ms), so oversubscribed ranks leave the cores to the holder.

    The counters live on team rank 0, so lock hand-over needs rank 0 to enter MPI now and then (see
    the module notes on progress). The lock is not recursive (:meth:`lock` on a rank that holds it
    raises ``RuntimeError``) and has no owner recovery: a rank that stops while holding it blocks the
    others. Every write done through
    :class:`DistArray` returns complete at its owner, so writes made under the lock are visible to the
    next holder.
    """

    _SPIN = 16                 # polls without pause when next in line: a quick hand-over
    _YIELD = 32                # then polls after giving up the core (oversubscribed ranks)
    _BASE_DELAY = 50e-6        # s; then naps, about the shortest sleep Linux grants (timer slack)
    _MAX_DELAY = 1e-3

    def __init__(self, team: Team | None = None):
        team = team if team is not None else Team.world()
        if not isinstance(team, Team):
            raise ValueError(f"Mutex needs a Team, got {team!r}")
        self.team = team
        self._held = False
        self._freed = False
        nbytes = 2 * 8 if team.rank == 0 else 0
        self._win = MPI.Win.Allocate(nbytes, 8, comm=team.comm)
        self._win.Lock_all(MPI.MODE_NOCHECK)
        if team.rank == 0:       # initialise through the window, then publish with the barrier
            self._win.Accumulate([np.zeros(2, np.int64), MPI.INT64_T], 0, (0, 2, MPI.INT64_T), MPI.REPLACE)
            self._win.Flush(0)
        team.comm.Barrier()
        _live.append(self)

    def __repr__(self) -> str:
        state = "freed" if self._freed else ("held" if self._held else "not held")
        return f"Mutex(team size {self.team.size}, {state} by rank {self.team.rank})"

    # ------------------------------------------------------------------ helpers
    def _alive(self) -> None:
        if self._freed:
            raise RuntimeError("this Mutex was freed; it can no longer be used")

    def _op(self, slot: int, value: int, op: MPI.Op) -> int:
        res = np.empty(1, np.int64)
        self._win.Fetch_and_op([np.array([value], np.int64), MPI.INT64_T], [res, MPI.INT64_T], 0, slot, op)
        self._win.Flush(0)
        return int(res[0])

    def _wait(self, ahead: int, polls: int) -> None:
        """Pause before the next poll: spin when next in line, then yield the core, then nap
        in proportion to the place in the queue, doubling while the queue does not move.

        Each pause also lets MPI progress: with an MPI whose one-sided operations are carried by
        the target's progress engine (Open MPI's osc/pt2pt) the holder's operations on this rank's
        windows would otherwise wait for this rank, which only polls its own counter.
        """
        self.team.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
        if ahead == 1 and polls < self._SPIN:
            return
        if polls < self._SPIN + self._YIELD:
            os.sched_yield()
            return
        n = polls - self._SPIN - self._YIELD
        time.sleep(min(self._MAX_DELAY, self._BASE_DELAY * ahead * 2 ** min(n, 5)))

    def _peek(self) -> tuple[int, int]:
        """``(next ticket, ticket being served)``; for tests and debugging. One-sided."""
        self._alive()
        return self._op(_NEXT, 0, MPI.NO_OP), self._op(_SERVING, 0, MPI.NO_OP)

    # ------------------------------------------------------------------ locking (one-sided)
    @property
    def held(self) -> bool:
        """Whether the calling rank holds the lock. Local."""
        return self._held

    def lock(self) -> None:
        """Wait until the calling rank holds the lock (FIFO among waiters). One-sided.

        Raises ``RuntimeError`` if this rank already holds it or the mutex was freed.
        """
        self._alive()
        if self._held:
            raise RuntimeError("lock: this rank already holds the Mutex (it is not recursive)")
        ticket = self._op(_NEXT, 1, MPI.SUM)
        serving = self._op(_SERVING, 0, MPI.NO_OP)
        polls = 0                          # polls since the queue last moved
        while serving != ticket:
            self._wait(ticket - serving, polls)
            polls += 1
            now = self._op(_SERVING, 0, MPI.NO_OP)
            if now != serving:
                polls = 0
            serving = now
        self._held = True

    def try_lock(self) -> bool:
        """Take the lock if nobody holds or waits for it; return whether this rank now holds it.
        One-sided, never waits. ``False`` also when this rank holds it already."""
        self._alive()
        if self._held:
            return False
        serving = self._op(_SERVING, 0, MPI.NO_OP)
        # the lock is free exactly when no ticket beyond the served one was drawn
        res = np.empty(1, np.int64)
        self._win.Compare_and_swap([np.array([serving + 1], np.int64), MPI.INT64_T],
                                   [np.array([serving], np.int64), MPI.INT64_T],
                                   [res, MPI.INT64_T], 0, _NEXT)
        self._win.Flush(0)
        self._held = int(res[0]) == serving
        return self._held

    def unlock(self) -> None:
        """Release the lock held by the calling rank. One-sided.

        Raises ``RuntimeError`` if this rank does not hold it or the mutex was freed.
        """
        self._alive()
        if not self._held:
            raise RuntimeError("unlock: this rank does not hold the Mutex")
        self._held = False
        self._op(_SERVING, 1, MPI.SUM)

    def __enter__(self) -> "Mutex":
        self.lock()
        return self

    def __exit__(self, *exc) -> None:
        self.unlock()

    # ------------------------------------------------------------------ lifetime
    def free(self) -> None:
        """Release the mutex's window. Collective; idempotent. No rank may hold or wait for it."""
        if self._freed:
            return
        self._freed = True
        self._held = False
        _live.remove(self)
        self._win.Unlock_all()
        self._win.Free()


@atexit.register
def _free_at_exit() -> None:
    # As for array segments (see memory.py): MPI_Finalize crashes in UCX with windows still
    # allocated; every rank holds the same live mutexes, so freeing them in order matches.
    if MPI.Is_finalized():
        return
    for m in list(_live):
        m.free()

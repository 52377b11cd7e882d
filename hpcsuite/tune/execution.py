"""Instrumented execution: kernel interception, selective execution and critical-path propagation.

Inside ``with Execution(model, mode) as ex: program()`` every communication call made through a
:class:`~hpcsuite.runtime.Team` and every computation kernel run through
:func:`hpcsuite.runtime.compute` is intercepted:

* **profile** executes everything, times every kernel and updates the model's statistics;
* **selective** skips kernels the model knows to the requested confidence (*steady*) and charges
  their mean time instead; a communication kernel is skipped only when every participant agrees
  (decided in the same small allreduce that merges the path), and for point-to-point messages the
  receiver follows the sender's decision, so skipping never deadlocks even when ranks disagree;
* **skeleton** executes no kernel at all and only counts them.

The execution path travels with the program's own communication, as in the reference autotuner:
before each collective a small allreduce (MAX) merges every rank's path times (total,
computation, communication), before each point-to-point exchange the path goes ahead on its own
tag, and before each neighbourhood exchange (a PGAS halo update, the ghost rows of a sparse
product) it is swapped with every neighbour (the exchange is one kernel from its start to its
completion; a neighbour pair skips its messages when both ends are steady). Time between intercepted kernels (Python glue) is measured and charged as computation; the
time of the internal allreduces and of input resets is excluded. The result of a run is its
predicted critical-path time.

Statistics along the path (``share=True``, the default outside skeleton mode): the kernel
statistics a rank gathered travel with its path, as in the reference tool. Before a collective the
path allreduce also says whether any participant has statistics the others have not seen; if so
they are allgathered (one more pair of small collectives). A point-to-point path message says how
many bytes of statistics follow it, and each neighbour of a halo exchange gets its own. Each rank
sends only the changes since its last message on that communicator (or to that peer), as snapshots
keyed by the rank that measured them (:meth:`Model.learn` keeps the newest, so a sample reaching a
rank by two routes counts once). A kernel measured on some ranks is so skipped on the others once
the merged statistics are steady. Exchanges cost time only while kernels are still being measured.

Racing (``abandon_above``): once a rank's path exceeds the bound it marks the path *abandoned*.
The mark travels with the path like the times do, and every rank that has seen it skips all
remaining kernels it can (buffer collectives by the same agreement as steady ones, point-to-point
transfers by the sender's word, all computation), so the program runs to its end in a fraction of
its time and :class:`Abandoned` is raised on every rank when the context exits. Raising at the
moment of the crossing would deadlock: a path merged on a row communicator of a process grid is
known only to that row, and the other ranks would wait for it in their next column collective.

Numerical safety: skipped kernels leave buffers stale. A computation kernel that does run after a
skip first calls its ``reset`` hook (e.g. potrf makes its block SPD) and the reset time is excluded;
a selective run is flagged ``numerically_valid=False`` when anything was skipped. Memory state:
a skipped collective leaves its receive buffer untouched, and a freshly mapped one (``np.empty`` of
many MB) then reads as the kernel's zero page, faster than after a real receive; programs should
reuse large receive buffers (``linalg.cholqr`` does), or their predictions come out low. Object (pickle)
collectives such as ``team.allreduce(x)`` are never skipped because their results steer control
flow; only buffer collectives and point-to-point transfers are.

A kernel called inside another (a patched ``numpy.dot`` inside an ``@kernel`` function, a
:class:`~hpcsuite.runtime.Team` over a communicator that ``tune.intercept`` made visible) is part of
the outer kernel: it runs as a plain call, and so do the execution's own messages. A computation
kernel may say what a skipped call returns (``fn.skipped_result()``, e.g. zeros of the result's
shape and dtype for a NumPy/SciPy call, :mod:`hpcsuite.tune.blas`) and whether it can be skipped
yet (``fn.skippable``); otherwise a skipped kernel returns its first argument.

Path breakdown: besides the merged path, each rank keeps its own computation and communication
time; the rest of its path is the time it waited for later partners (a merge that moved its path
forward). The breakdown of the predicted time is that of the rank whose path is the longest at
the end (the critical path's last rank): computation, communication and idle (synchronisation),
which add up to the predicted time. This is the reference tool's per-process decomposition
(computation, communication, idle) evaluated on the rank that ends the critical path: idle there
is the part of the critical path spent waiting for work on other ranks.
"""
from __future__ import annotations

import dataclasses
import pickle
import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ..runtime import comm_hooks, compute_hooks
from ..runtime.waiting import wait as _wait, waitall as _waitall
from .stats import Model

__all__ = ["Execution", "ExecutionResult", "Abandoned", "MODES", "run_full", "channel_id"]

MODES = ("profile", "selective", "skeleton")
_PATH_TAG = 32731                      # tag of the path messages that precede point-to-point data
_ACK_IN, _ACK_OUT = np.zeros(1, np.int8), np.zeros(1, np.int8)
# collectives: merged and agreed on with one internal allreduce; buffer ones may be skipped
_COLLECTIVE = {"Barrier", "Bcast", "Ibcast", "Allreduce", "Allgather", "Allgatherv", "Alltoall", "Alltoallv",
               "Alltoallw", "Reduce", "Gatherv", "Scatterv", "Exscan", "bcast", "allreduce", "allgather",
               "gather",
               # further ones a plain mpi4py communicator has (tune.intercept): merged, not skipped
               "Gather", "Scatter", "Scan", "Reduce_scatter", "Reduce_scatter_block", "barrier", "reduce",
               "scatter", "alltoall", "scan", "exscan", "Ibarrier", "Iallreduce", "Iallgather", "Iallgatherv",
               "Ialltoall", "Ialltoallv", "Ireduce", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iscan",
               "Iexscan"}
_SKIPPABLE = {"Barrier", "Bcast", "Ibcast", "Allreduce", "Allgather", "Allgatherv", "Alltoallv",
              "Alltoallw", "Reduce"}
# neighbourhood exchanges, started as NAME and completed as NAME_wait: PGAS halo updates and the
# ghost-row exchange of the distributed sparse matrix (solvers.sparse)
_NEIGHBOURHOOD = {"Halo", "Ghosts"}


_CHANNELS = {"keyval": None, "next": 0}


def channel_id(comm) -> int:
    """A number for ``comm`` that no other communicator of this process has had, kept in an MPI
    attribute (``Comm.Create_keyval``): the statistics this rank sent on it are remembered under
    it. Not the handle (``py2f``): MPI hands a freed communicator's handle to the next one made,
    whose members may differ, and the new one must start from nothing sent (measured: MPICH
    reuses the handle of a freed ``Dup`` at once). A ``Dup`` does not copy it. Local."""
    kv = _CHANNELS["keyval"]
    if kv is None:
        kv = _CHANNELS["keyval"] = MPI.Comm.Create_keyval()
    cid = comm.Get_attr(kv)
    if cid is None:
        cid = _CHANNELS["next"]
        _CHANNELS["next"] = cid + 1
        comm.Set_attr(kv, cid)
    return cid


class Abandoned(Exception):
    """Raised on every rank, when the context exits, if a run's predicted path exceeded the bound
    set by a racing search."""

    def __init__(self, predicted: float, bound: float):
        super().__init__(f"predicted time {predicted:.4g} s already exceeds the bound {bound:.4g} s")
        self.predicted, self.bound = predicted, bound


@dataclass
class ExecutionResult:
    """What one instrumented run yields (the same on every rank)."""

    mode: str
    predicted: float = 0.0            # critical-path time: max over ranks of the path total
    computation: float = 0.0
    communication: float = 0.0
    executed: int = 0                 # kernel executions on this rank
    skipped: int = 0
    executed_time: float = 0.0        # seconds of executed kernels (max over ranks)
    wall: float = 0.0                 # wall time of the instrumented run (max over ranks)
    numerically_valid: bool = True
    counts: dict = field(default_factory=dict)
    shared: int = 0                   # statistics messages this rank sent along the path
    shared_bytes: int = 0
    # the predicted time split on the critical path's last rank (see the module notes):
    # {"computation": s, "communication": s, "idle": s}, adding up to ``predicted``
    breakdown: dict = field(default_factory=dict)
    critical_rank: int = 0

    @property
    def skipped_fraction(self) -> float:
        n = self.executed + self.skipped
        return self.skipped / n if n else 0.0


class Execution:
    """A context manager that runs a program under interception. Collective over ``comm``
    (entry and exit synchronise the ranks).

    Parameters
    ----------
    model : Model
        Kernel statistics (updated by executed kernels; persists across executions).
    mode : {"profile", "selective", "skeleton"}
    comm : MPI communicator
        The ranks that run the program (default COMM_WORLD).
    abandon_above : float, optional
        Raise :class:`Abandoned` on every rank once the merged path time exceeds this.
    share : bool
        Send kernel statistics along the path (see the module notes; not in skeleton mode).
    record : {True, False, "provisional"}
        Add the executed kernels' times to the model (default). ``False`` for a run whose times are
        not representative: its kernels still run and are timed for this run's prediction, but the
        model keeps no sample of them. ``"provisional"`` (a configuration's first run): the run
        learns as usual from each kernel's second call on, so that it skips a kernel once steady,
        but the model forgets these samples when the run ends, and no statistics travel along its
        path (``share`` off). A first run pays first-touch costs that later runs do not (potrf(32)
        94 us in its first call against 7.4 us later; at n = 384 a model that kept first-run
        samples predicted 20-35 % high), while executing every kernel in it costs a full run.
    """

    def __init__(self, model: Model, mode: str = "selective", comm=None, abandon_above: float | None = None,
                 share: bool = True, record: bool = True):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.model, self.mode = model, mode
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.abandon_above = abandon_above
        self.share = bool(share) and mode != "skeleton"
        if record not in (True, False, "provisional"):
            raise ValueError(f"record must be True, False or 'provisional', got {record!r}")
        self.record = record
        if record == "provisional":
            self.share = False
        self._saved: dict = {}         # provisional: key -> its statistics before this run (or None)
        # total, computation, communication, "a kernel was skipped upstream" (stale data travels
        # with the messages that carry it) and "abandoned": all merged with MAX
        # (Python floats, not an array: the path is updated around every kernel, and indexing a
        # NumPy array element by element costs several times more)
        self.path = [0.0] * 5
        self._steady_memo: dict = {}   # key -> (steady?, charged mean), valid until its statistics change
        self.result = ExecutionResult(mode)
        self._skipped_any = False
        self._prev = None              # key of the last intercepted kernel, and whether it was skipped
        self._prev_skipped = False
        self._last = 0.0
        self._stack = []
        self._halo_pending: dict = {}  # halo exchanges started and not yet waited for
        self._own = [0.0, 0.0]         # this rank's own computation and communication time
        self._ran = 0.0                # time of the kernels this rank executed
        self._busy = False             # inside an intercepted kernel: nested calls run plainly
        # diagnostics (bench/tune_signatures.py): when a dict, every kernel execution of a
        # selective run is counted here by (reason, kernel name); see :meth:`_why`
        self.why: dict | None = None
        self._calls: dict = {}         # key -> calls this run (executed and skipped): the shares

    # ------------------------------------------------------------------ context
    def __enter__(self) -> "Execution":
        self._changes_at = len(self.model.changes)
        if self.share:
            self.model.origin = MPI.COMM_WORLD.Get_rank()
        self.comm.Barrier()
        self._t0 = self._last = time.perf_counter()
        self._stack = [comm_hooks.intercept(self._on_comm), compute_hooks.intercept_compute(self._on_compute)]
        for cm in self._stack:
            cm.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for cm in reversed(self._stack):
            cm.__exit__(None, None, None)
        self._forget()
        self._tally()
        if exc_type is not None:
            return
        self._glue()
        mine = np.array([*self.path[:3], float(self._skipped_any), self.path[4], time.perf_counter() - self._t0,
                         *self._own, self._ran])
        every = np.empty((self.comm.Get_size(), mine.size))
        self.comm.Allgather(mine, every)
        buf = every.max(axis=0)
        r = self.result
        r.predicted, r.computation, r.communication = (float(x) for x in buf[:3])
        r.wall = float(buf[5])
        r.executed_time = float(buf[8])
        r.numerically_valid = not buf[3]
        crit = int(np.argmax(every[:, 0]))           # the first rank with the longest path
        total, comp, comm = (float(x) for x in every[crit, [0, 6, 7]])
        r.critical_rank = crit
        r.breakdown = {"computation": comp, "communication": comm, "idle": max(total - comp - comm, 0.0)}
        if self.mode != "skeleton" and not buf[4]:
            self.model.note_shares({k: e + s for k, (e, s) in self._calls.items()}, r.predicted)
        if buf[4]:
            raise Abandoned(r.predicted, self.abandon_above)

    # ------------------------------------------------------------------ accounting
    def _glue(self) -> None:
        now = time.perf_counter()
        dt = now - self._last
        self.path[0] += dt
        self.path[1] += dt
        self._own[0] += dt
        self._last = now

    def _count(self, key, skipped: bool) -> None:
        c = self._calls.get(key)
        if c is None:
            c = self._calls[key] = [0, 0]
        c[1 if skipped else 0] += 1

    def _tally(self) -> None:
        """Counts by kernel name and in all, from the per-key counts (at the end of a run)."""
        counts = self.result.counts
        for key, (e, s) in self._calls.items():
            c = counts.get(key[1])
            if c is None:
                c = counts[key[1]] = [0, 0]
            c[0] += e
            c[1] += s
            self.result.executed += e
            self.result.skipped += s

    def _steady(self, key) -> bool:
        if self.mode == "skeleton" or self.path[4]:
            return True
        if self.mode != "selective":
            return False
        memo = self._steady_memo.get(key)
        if memo is None:
            share = None
            if key not in self.model.share:      # no run recorded its share yet: this run's so far
                s = self.model.kernels.get(key)
                c = self._calls.get(key)
                path = self.path[0]
                share = min((sum(c) + 1) * s.mean / path, 1.0) if s is not None and c and path > 0 else 1.0
            # (keyword only when set: a Model subclass may override steady(key) / mean(key))
            kw = {} if share is None else {"share": share}
            steady = self.model.steady(key, **kw)
            memo = self._steady_memo[key] = (steady, self.model.mean(key, **kw) if steady else 0.0)
        return memo[0]

    def _charge(self, key, comm: bool) -> float:
        t = 0.0
        if self.mode != "skeleton" and not self.path[4]:
            memo = self._steady_memo.get(key)
            t = memo[1] if memo is not None and memo[0] else self.model.mean(key)
        s = self.model.kernels.get(key)
        if s is not None:
            s.skipped += 1
        self._prev, self._prev_skipped = key, True
        self._skipped_any = True
        self.path[3] = 1.0
        self._count(key, True)
        return t

    def _timed(self, key, fn, args, kwargs):
        """Run and time a kernel, and record its sample (see ``record``)."""
        t0 = time.perf_counter()
        res = fn(*args, **kwargs)
        t = time.perf_counter() - t0
        self._ran += t
        if self._keeps(key):
            self.model.record(key, t)
            self._steady_memo.pop(key, None)
        self._prev, self._prev_skipped = key, False
        self._count(key, False)
        return res, t

    def _keeps(self, key) -> bool:
        """Whether an executed call of ``key`` becomes a sample (see ``record``); a provisional
        run saves the statistics it is about to change."""
        if self.record is True:
            return True
        if self.record is False or key not in self._calls:     # (provisional: not the first call)
            return False
        if key not in self._saved:
            old = self.model.kernels.get(key)
            self._saved[key] = None if old is None else dataclasses.replace(old)
        return True

    def _forget(self) -> None:
        """Provisional run: restore the statistics it changed and drop its change log (other runs
        keep theirs: it is what statistics along the path send in later runs)."""
        if self.record != "provisional":
            return
        for key, old in self._saved.items():
            if old is None:
                self.model.kernels.pop(key, None)
            else:
                self.model.kernels[key] = old
        del self.model.changes[self._changes_at:]
        self._saved.clear()
        self._steady_memo.clear()

    def _why(self, key, reason: str | None = None) -> None:
        """Count why ``key`` executes (diagnostics only, ``self.why`` set): ``reason`` when the
        caller knows it (not skippable, another rank not steady, ...), else from the model:
        a signature never seen, too few samples, or a confidence interval wider than the
        tolerance."""
        if self.mode != "selective":
            return
        if reason is None:
            m = self.model
            s = m.merged(key) if key in m.remote else m.kernels.get(key)
            if s is None or s.n == 0:
                reason = "new signature"
            elif s.n < max(m.min_samples, 2):
                reason = "too few samples"
            elif s.mean <= 0 or m.z * s.stderr / s.mean >= m.tolerance_of(key, 1.0):
                reason = "interval wider than tolerance"
            else:
                reason = "steady (model)"
        k = (reason, key[1])
        self.why[k] = self.why.get(k, 0) + 1

    # ------------------------------------------------------------------ computation kernels
    def _on_compute(self, name, key, flops, reset, fn, args, kwargs):
        if self._busy:                       # inside another kernel: part of it
            return fn(*args, **kwargs)
        self._glue()
        k = ("comp", name, key)
        if self._steady(k) and getattr(fn, "skippable", True):
            t = self._charge(k, comm=False)
            make = getattr(fn, "skipped_result", None)
            res = make() if make is not None else args[0] if args and hasattr(args[0], "shape") else None
        elif self.mode == "skeleton":        # cannot be skipped yet: runs, untimed, no sample
            self._busy = True
            try:
                res = fn(*args, **kwargs)
            finally:
                self._busy = False
            t = self._charge(k, comm=False)
        else:
            if self.why is not None:
                self._why(k, "not skippable yet" if self.mode == "selective" and self._steady(k) else None)
            if reset is not None and (self._skipped_any or self.path[3]):
                reset()                      # stale inputs after skips: make them well-conditioned
                self._last = time.perf_counter()    # the reset is not charged to the path
            self._busy = True
            try:
                res, t = self._timed(k, fn, args, kwargs)
            finally:
                self._busy = False
        self.path[0] += t
        self.path[1] += t
        self._own[0] += t
        self._check_bound()
        self._last = time.perf_counter()
        return res

    # ------------------------------------------------------------------ communication kernels
    def _on_comm(self, team, name, nbytes, fn, args, kwargs):
        if self._busy:                       # inside another kernel, or this execution's own messages
            return fn(*args, **kwargs)
        self._busy = True
        try:
            return self._comm_kernel(team, name, nbytes, fn, args, kwargs)
        finally:
            self._busy = False

    def _comm_kernel(self, team, name, nbytes, fn, args, kwargs):
        self._glue()
        if name == "Sendrecv":
            return self._on_sendrecv(team, nbytes, fn, args, kwargs)
        if name in _NEIGHBOURHOOD:
            return self._on_halo_start(team, name, nbytes, fn, args[0])
        if name.endswith("_wait") and name[:-5] in _NEIGHBOURHOOD:
            return self._on_halo_wait(fn, args[0])
        k = ("comm", name, team.size, int(nbytes))
        if name not in _COLLECTIVE:
            # local completion calls (Wait) and one-sided point-to-point: timed, never skipped
            if self.why is not None:
                self._why(k, "never skipped (" + name + ")")
            self._last = time.perf_counter()
            res, t = self._timed(k, fn, args, kwargs)
        else:
            mine = self._steady(k) and name in _SKIPPABLE
            ch = ("c", channel_id(team.comm))
            payload = self._delta(ch)
            buf = np.array([*self.path, 0.0 if mine else 1.0, len(payload) if payload else 0.0])
            _wait(team.comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.MAX))   # merge paths, agree
            if buf[6]:
                self._share_collective(team.comm, ch, payload, int(buf[6]))
            self.path[:] = buf[:5].tolist()
            self._check_bound()
            if buf[5] == 0.0:
                t, res = self._charge(k, comm=True), None
            else:
                if self.why is not None:
                    self._why(k, "not skippable (" + name + ")" if name not in _SKIPPABLE else
                              "another rank not steady" if mine else None)
                self._last = time.perf_counter()
                res, t = self._timed(k, fn, args, kwargs)
        self.path[0] += t
        self.path[2] += t
        self._own[1] += t
        self._last = time.perf_counter()
        return res

    def _on_sendrecv(self, team, nbytes, fn, args, kwargs):
        sendbuf, dest, sendtag, recvbuf, source, recvtag = args
        sends, receives = dest != MPI.PROC_NULL, source != MPI.PROC_NULL
        # the key says which halves this rank does: the two ends of a chain (send only, receive
        # only) take different times than the middle, and one key for all would never be steady
        k = ("comm", "Sendrecv", 2, int(nbytes), int(sends), int(receives))
        mine = self._steady(k)
        h = channel_id(team.comm)
        payload = self._delta(("p", h, dest)) if sends else None
        out = np.array([*self.path, 1.0 if mine else 0.0, len(payload) if payload else 0.0])
        inn = out.copy()
        # the path goes ahead (non-blocking + the runtime's wait: blocking calls spin, and with
        # more ranks than cores that made a ring broadcast 9x slower under the tuner)
        _waitall([team.comm.Irecv(inn, source, _PATH_TAG), team.comm.Isend(out, dest, _PATH_TAG)])
        if not receives:
            inn = out.copy()
            inn[6] = 0.0
        self._share_p2p(team.comm, h, [(dest, payload)], [(source, int(inn[6]))])
        do_send = sends and not mine
        do_recv = receives and not inn[5]                   # the receiver follows the sender
        # and an acknowledgement back, so that the sender too starts timing once its receiver is
        # there: when skipping has put the ranks at different real times, a send that waits for a
        # late receiver would otherwise count that wait as communication. Only for transfers that
        # run: both ends know from the sender's flag whether it does, so no message is left over.
        acks = ([team.comm.Irecv(_ACK_IN, dest, _PATH_TAG + 1)] if do_send else []) + \
               ([team.comm.Isend(_ACK_OUT, source, _PATH_TAG + 1)] if do_recv else [])
        _waitall(acks)
        self.path[:] = np.maximum(self.path, inn[:5]).tolist()
        self._check_bound()
        self._last = time.perf_counter()
        if do_send == sends and do_recv == receives:        # all of this rank's part runs
            if self.why is not None:
                self._why(k, "sender not steady" if mine else None)
            _, t = self._timed(k, fn, args, kwargs)
        elif not do_send and not do_recv:
            t = self._charge(k, comm=True)
        else:                                               # half skipped: time it, keep no sample
            if self.why is not None:
                self._why(k, "half of a Sendrecv")
            t0 = time.perf_counter()
            if do_recv:
                _wait(team.comm.Irecv(recvbuf, source, recvtag))
            else:
                _wait(team.comm.Isend(sendbuf, dest, sendtag))
            t = time.perf_counter() - t0
            self._ran += t
            self._skipped_any = True
            self.path[3] = 1.0
            self._count(k, False)
        self.path[0] += t
        self.path[2] += t
        self._own[1] += t
        self._last = time.perf_counter()
        return None

    def _on_halo_start(self, team, name, nbytes, start, request_peers):
        """A halo exchange (pgas): messages with several neighbours, started now, completed by
        :meth:`_on_halo_wait`. The path is swapped with every neighbour first, with this rank's
        steadiness; an exchange with a neighbour is skipped when both ends are steady (each pair
        decides alike, so no message is left unmatched), and the whole kernel is charged its mean
        when every exchange of this rank is skipped. Key: neighbours, messages and bytes (a rank
        at a non-periodic edge has fewer and takes a different time)."""
        peers = sorted(set(request_peers))
        k = ("comm", name, len(peers), len(request_peers) // 2, int(nbytes))
        mine = self._steady(k)
        h = channel_id(team.comm)
        payloads = [self._delta(("p", h, q)) for q in peers]
        outs = [np.array([*self.path, 1.0 if mine else 0.0, len(pl) if pl else 0.0]) for pl in payloads]
        ins = [np.empty(7) for _ in peers]
        _waitall([team.comm.Irecv(b, q, _PATH_TAG + 2) for b, q in zip(ins, peers)] +
                 [team.comm.Isend(o, q, _PATH_TAG + 2) for o, q in zip(outs, peers)])
        self._share_p2p(team.comm, h, list(zip(peers, payloads)), [(q, int(b[6])) for q, b in zip(peers, ins)])
        for b in ins:
            self.path[:] = np.maximum(self.path, b[:5]).tolist()
        self._check_bound()
        active = [q for q, b in zip(peers, ins) if not (mine and b[5])]
        self._last = time.perf_counter()
        if not active:
            started, t, state = start([]), self._charge(k, comm=True), "skipped"
        else:
            t0 = time.perf_counter()
            started = start(None if len(active) == len(peers) else active)
            t = time.perf_counter() - t0
            self._ran += t
            state = "full" if len(active) == len(peers) else "partial"
            if state == "partial":                    # stale ghosts from the skipped neighbours
                self._skipped_any = True
                self.path[3] = 1.0
        self._halo_pending[id(started)] = (k, t, state)
        self.path[0] += t
        self.path[2] += t
        self._own[1] += t
        self._last = time.perf_counter()
        return started

    def _on_halo_wait(self, wait, started):
        k, t_start, state = self._halo_pending.pop(id(started), (None, 0.0, "skipped"))
        self._last = time.perf_counter()
        t0 = time.perf_counter()
        wait(started)
        t = time.perf_counter() - t0
        if state != "skipped":
            self._ran += t
        if k is not None and state == "full":          # a sample: start plus completion
            if self._keeps(k):
                self.model.record(k, t_start + t)
                self._steady_memo.pop(k, None)
            self._prev, self._prev_skipped = k, False
            self._count(k, False)
        elif k is not None and state == "partial":     # timed, but not a sample of the kernel
            self._count(k, False)
        self.path[0] += t
        self.path[2] += t
        self._own[1] += t
        self._last = time.perf_counter()

    # ------------------------------------------------------------------ statistics along the path
    def _delta(self, channel):
        """The statistics this rank learned or measured since it last sent on ``channel``
        (pickled), or ``None``."""
        if not self.share:
            return None
        log, sent = self.model.changes, self.model.sent
        pos = sent.get(channel)
        if pos is not None and pos >= len(log):
            return None
        sent[channel] = len(log)
        # a channel used for the first time gets everything this rank knows, later only changes
        todo = self.model.known() if pos is None else dict.fromkeys(log[pos:])
        items = []
        for origin, key in todo:
            snap = self.model.snapshot(origin, key)
            if snap is not None and snap[0] > 0:
                items.append((origin, key, *snap))
        if not items:
            return None
        data = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        self.result.shared += 1
        self.result.shared_bytes += len(data)
        return data

    def _learn(self, channel, data) -> None:
        log, sent = self.model.changes, self.model.sent
        caught_up = channel in sent and sent[channel] >= len(log)
        for origin, key, n, mean, m2 in pickle.loads(data):
            if self.model.learn(origin, key, n, mean, m2):
                self._steady_memo.pop(key, None)
        if caught_up:                  # what came from this channel need not go back on it
            sent[channel] = len(log)

    def _share_collective(self, comm, channel, payload, longest: int) -> None:
        """Allgather every participant's statistics (collective over ``comm``): one allgather of
        ``longest`` bytes each (the path allreduce gave the longest), the length in front."""
        mine = np.zeros(longest + 8, np.uint8)
        if payload:
            mine[:8] = np.frombuffer(np.int64(len(payload)).tobytes(), np.uint8)
            mine[8:8 + len(payload)] = np.frombuffer(payload, np.uint8)
        recv = np.empty((comm.Get_size(), longest + 8), np.uint8)
        _wait(comm.Iallgather(mine, recv))
        me = comm.Get_rank()
        for r in range(comm.Get_size()):
            size = int(recv[r, :8].view(np.int64)[0])
            if size and r != me:
                self._learn(channel, recv[r, 8:8 + size].tobytes())

    def _share_p2p(self, comm, h, sends, receives) -> None:
        """Send each ``(peer, payload)`` and receive ``(peer, nbytes)`` announced in the path
        messages (point-to-point, on their own tag)."""
        reqs, bufs = [], []
        for q, nb in receives:
            if nb:
                b = np.empty(nb, np.uint8)
                bufs.append((q, b))
                reqs.append(comm.Irecv(b, q, _PATH_TAG + 3))
        for q, pl in sends:
            if pl:
                reqs.append(comm.Isend(np.frombuffer(pl, np.uint8), q, _PATH_TAG + 3))
        if reqs:
            _waitall(reqs)
        for q, b in bufs:
            self._learn(("p", h, q), b.tobytes())

    def _check_bound(self) -> None:
        """Mark the path abandoned once it exceeds the racing bound (see the module notes)."""
        if self.abandon_above is not None and self.path[0] > self.abandon_above:
            self.path[4] = 1.0


def run_full(program, comm=None) -> float:
    """Wall time of ``program()`` run without interception: the slowest rank's time, all ranks
    started together. Collective."""
    comm = comm if comm is not None else MPI.COMM_WORLD
    comm.Barrier()
    t0 = time.perf_counter()
    program()
    dt = time.perf_counter() - t0
    return comm.allreduce(dt, op=MPI.MAX)

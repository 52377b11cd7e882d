"""Waiting for MPI without stealing the core of the rank being waited for.

MPICH (ch4:ucx) waits by spinning in its progress loop. With one rank per core that is the fastest
way to wait; when ranks outnumber the cores (4 ranks on a 2-core CI machine, or a node shared with
other jobs) a spinning rank takes the CPU from the very rank it waits for, and collectives become
10-100x slower. In that case hpcsuite's own communication (``Team`` collectives, halo exchanges,
the tuner's path merges) starts non-blocking operations and waits politely: test and yield the core
(``sched_yield``, which hands it to a runnable rank and costs ~0.5 us when there is none) for up to
1 ms, then sleep in steps doubling up to 0.2 ms, so that long waits do not burn a core. Sleeping
from the start costs a timer slack of 50-80 us per wait; yielding first made an 8-double
Allreduce at 4 ranks on 2 cores ~30x faster (584 -> 17 us, ``bench/tune_overhead.py``).

Politeness is on when this node runs more ranks than the process may use cores (from the
launcher's environment, any vendor's: ``runtime.launcher.env_local_size``), or when
``HPCSUITE_POLITE_WAIT=1``; ``=0`` turns it off. The decision is local and made at the first wait,
which may come inside any sub-team's collective, so it cannot ask MPI (a node split is collective
over the world).
"""
from __future__ import annotations

import functools
import os
import time

from mpi4py import MPI

from .launcher import env_local_size

__all__ = ["polite", "wait", "waitall"]


@functools.lru_cache(maxsize=None)
def polite() -> bool:
    """Whether to wait politely (see the module notes). Local, decided once per process."""
    forced = os.environ.get("HPCSUITE_POLITE_WAIT")
    if forced in ("0", "1"):
        return forced == "1"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return env_local_size() > cores


_YIELD_FOR = 1e-3        # seconds of test-and-yield before napping


def _sleep_until(test) -> None:
    if test():
        return
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < _YIELD_FOR:
        os.sched_yield()
        if test():
            return
    delay = 1e-5
    while not test():
        time.sleep(delay)
        delay = min(2 * delay, 2e-4)


def wait(request) -> None:
    """Complete ``request`` (politely when oversubscribed)."""
    if request is None:
        return
    if polite():
        _sleep_until(request.Test)
    else:
        request.Wait()


def waitall(requests) -> None:
    """Complete every request of ``requests`` (politely when oversubscribed)."""
    if not requests:
        return
    if polite():
        _sleep_until(lambda: MPI.Request.Testall(requests))
    else:
        MPI.Request.Waitall(requests)

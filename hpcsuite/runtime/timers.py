"""Named wall-clock timers shared by the apps and the benchmarks.

:class:`Timers` accumulates time per name (``with timers("halo"): ...``); :meth:`Timers.summary`
reduces them over a team (min / mean / max across ranks, the max being what a bulk-synchronous code
waits for). :func:`measure` times a function repeatedly and returns the samples, from which the
benchmarks take medians: timings on shared 2-core machines are noisy, single samples are not
evidence.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

import numpy as np

__all__ = ["Timers", "measure", "median"]


class Timers:
    """Accumulating named timers (seconds and call counts). Local, except :meth:`summary`."""

    def __init__(self, sync: Callable[[], None] | None = None):
        # ``sync`` is called before reading the clock (e.g. Device.synchronize for GPU work).
        self.total: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._sync = sync

    @contextlib.contextmanager
    def __call__(self, name: str):
        if self._sync:
            self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._sync:
                self._sync()
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        """Charge ``seconds`` to ``name``."""
        self.total[name] = self.total.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def summary(self, team=None) -> dict[str, dict[str, float]]:
        """``{name: {"min", "mean", "max", "calls"}}`` over the ranks of ``team``. Collective.

        Names must be the same on every rank (missing ones count as 0 s).
        """
        names = sorted(self.total)
        if team is not None and team.size > 1:
            names = sorted(set().union(*team.allgather(names)))
        vals = np.array([self.total.get(n, 0.0) for n in names])
        if team is not None and team.size > 1:
            from mpi4py import MPI
            lo, hi, tot = vals.copy(), vals.copy(), vals.copy()
            team.Allreduce(MPI.IN_PLACE, lo, op=MPI.MIN)
            team.Allreduce(MPI.IN_PLACE, hi, op=MPI.MAX)
            team.Allreduce(MPI.IN_PLACE, tot, op=MPI.SUM)
            mean = tot / team.size
        else:
            lo = hi = mean = vals
        return {n: {"min": float(lo[i]), "mean": float(mean[i]), "max": float(hi[i]),
                    "calls": self.calls.get(n, 0)} for i, n in enumerate(names)}

    def report(self, team=None) -> str:
        """A table of :meth:`summary` (collective), for rank 0 to print."""
        s = self.summary(team)
        if not s:
            return "(no timers)"
        w = max(len(n) for n in s)
        lines = [f"{'timer':<{w}}  {'max s':>9}  {'mean s':>9}  {'min s':>9}  {'calls':>7}"]
        for n, v in sorted(s.items(), key=lambda kv: -kv[1]["max"]):
            lines.append(f"{n:<{w}}  {v['max']:9.4f}  {v['mean']:9.4f}  {v['min']:9.4f}  {v['calls']:7d}")
        return "\n".join(lines)


def measure(fn: Callable[[], object], repeat: int = 7, warmup: int = 1,
            barrier: Callable[[], None] | None = None) -> list[float]:
    """Wall times of ``repeat`` calls of ``fn`` after ``warmup`` untimed calls.

    With ``barrier`` (e.g. ``team.barrier``) every sample starts together on all ranks and the
    caller should reduce the samples with MAX across ranks. Collective iff ``fn``/``barrier`` are.
    """
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        if barrier:
            barrier()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(samples) -> float:
    """Median of timing samples. Local."""
    return float(statistics.median(samples))

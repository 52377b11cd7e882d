"""Shared helpers for the side-by-side benchmarks in bench/.

Every benchmark times hpcsuite and its peer (raw mpi4py, NumPy, Heat, ...) in the same run, takes
the median of several samples (each sample the maximum over ranks, started together after a
barrier) and prints ratios. Timings on 2-core machines are noisy: read ratios, not seconds.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

COMM = MPI.COMM_WORLD


def _fit_threads():
    # every benchmark compares like with like: one BLAS/numba thread per core share per rank
    from hpcsuite.runtime import Team
    from hpcsuite.runtime.threads import fit_threads
    return fit_threads(Team.world())


THREADS = _fit_threads()


def timeit(fn, repeat: int = 9, warmup: int = 2, comm=COMM) -> float:
    """Median over ``repeat`` samples of the slowest rank's time for ``fn()``. Collective."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        samples.append(comm.allreduce(dt, op=MPI.MAX))
    return statistics.median(samples)


def timeit_local(fn, repeat: int = 9, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` on this rank only (no communication)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


class Table:
    """Rows of results printed by rank 0 as an aligned table (and optionally as JSON lines)."""

    def __init__(self, title: str, columns: list[str]):
        self.title, self.columns, self.rows = title, columns, []

    def add(self, *values) -> None:
        self.rows.append(values)

    def show(self) -> None:
        if COMM.Get_rank() != 0:
            return
        cells = [[_fmt(v) for v in r] for r in self.rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c)
                  for i, c in enumerate(self.columns)]
        print(f"\n## {self.title}  ({COMM.Get_size()} ranks, {MPI.Get_library_version().split(chr(10))[0].strip()})")
        print("  ".join(c.rjust(w) for c, w in zip(self.columns, widths)))
        for r in cells:
            print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
        out = os.environ.get("HPCSUITE_BENCH_JSON")
        if out:
            with open(out, "a") as f:
                for r in self.rows:
                    f.write(json.dumps({"bench": self.title, "ranks": COMM.Get_size(),
                                        **{c: _plain(v) for c, v in zip(self.columns, r)}}) + "\n")
        sys.stdout.flush()


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v

"""Temporal blocking against the single sweep and the copy bandwidth, at equal threads (issue 23).

Run: nice -n 10 .venv/bin/python bench/stencil_blocking.py [--sizes 256 512] [--threads 1 2]

For each grid of N^3 cells (double precision, fixed boundary layer) and each thread count, in one
process and at the same numba thread count for every row:

* ``copy``: a parallel numba copy of the padded grid (``prange`` over planes): the bandwidth
  limit of any kernel that sweeps the grid once per step (16 B per cell update, read + write);
* ``sweep``: the best single-sweep kernel (:func:`hpcsuite.accel.kernels.stencil7`, numba);
* ``blocked``: :func:`hpcsuite.accel.temporal.stencil7_steps`, T steps per pass, with T and the
  tile width chosen by a short timing (CPU time, best of 2) among T in {2, 4, 8} x tile in
  {16, 32, 64} (printed).

Rows are timed interleaved (copy, sweep, blocked, copy, ...) ``--repeat`` times and the medians
reported, so that load from other processes falls on all of them alike. Cell updates per second
are given by wall time and by CPU time of the process (on a shared machine the CPU-time rate is
the steadier one; with 2 threads it also counts time a thread waits for the other). The copy row
gives "cell updates per second" as copies of one cell per second. The last line is
``speedup X.XX at 2 threads, 256^3`` (wall-time medians; if 2 or 256 was not run, the last size
and thread count run).
"""
import argparse
import os
import statistics
import time

import numba
import numpy as np

from hpcsuite.accel import kernels, temporal

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
p.add_argument("--repeat", type=int, default=7, help="interleaved repetitions per row (medians)")
p.add_argument("--blocks", type=int, nargs="+", default=[2, 4, 8])
p.add_argument("--tiles", type=int, nargs="+", default=[16, 32, 64])
args = p.parse_args()

C7 = (0.4, 0.1, 0.12, 0.08)         # c0 + 2 (cx + cy + cz) = 1: a stable, bounded Jacobi/heat step


@numba.njit(parallel=True, cache=True)
def parallel_copy(a, b):  # pragma: no cover - compiled
    for i in numba.prange(a.shape[0]):
        b[i] = a[i]


def timed(fn):
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def main():
    print(f"# {os.cpu_count()} cores; numba {numba.__version__}, threading layer "
          f"{numba.config.THREADING_LAYER}; medians of {args.repeat} "
          f"interleaved repetitions; load average at start {os.getloadavg()[0]:.2f}")
    results = {}
    for n in args.sizes:
        u = np.random.default_rng(0).random((n + 2,) * 3)
        out = np.zeros_like(u)
        cells = n ** 3
        for th in args.threads:
            kernels.set_cpu_threads(th)
            # pick T and the tile by a short timing (best of 2 calls each)
            best = None
            for T in args.blocks:
                regs = [((1, n + 1),) * 3] * T
                for tile in args.tiles:
                    fn = lambda regs=regs, tile=tile: temporal.stencil7_steps(u, out, *C7, regs, tile=tile)  # noqa: E731
                    fn()
                    t = min(timed(fn)[1] for _ in range(2)) / T      # CPU time: steadier under load
                    if best is None or t < best[0]:
                        best = (t, T, tile)
            _, T, tile = best
            regs = [((1, n + 1),) * 3] * T
            rows = {
                "copy": (1, lambda: parallel_copy(u, out)),
                "sweep": (1, lambda: kernels.stencil7(u, out, *C7)),
                f"blocked T={T} tile={tile}": (T, lambda: temporal.stencil7_steps(u, out, *C7, regs, tile=tile)),
            }
            for _, fn in rows.values():
                fn()                                       # compile / load, first touch
            wall = {k: [] for k in rows}
            cpu = {k: [] for k in rows}
            for _ in range(args.repeat):
                for name, (steps, fn) in rows.items():
                    w, c = timed(fn)
                    wall[name].append(w / steps)
                    cpu[name].append(c / steps)
            load = os.getloadavg()[0]
            print(f"## {n}^3 cells, {th} thread(s) (load average {load:.2f})")
            print(f"{'row':>26} {'ms/step':>8} {'Gcell/s wall':>13} {'Gcell/s CPU x thr':>18} "
                  f"{'16 B/cell / copy':>17} {'vs sweep':>9}")
            med = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in rows}
            copy_rate = cells / med["copy"][0]
            for name in rows:
                w, c = med[name]
                rate, crate = cells / w, cells / c * th
                print(f"{name:>26} {w * 1e3:8.2f} {rate / 1e9:13.3f} {crate / 1e9:18.3f} "
                      f"{rate / copy_rate:17.2f} {med['sweep'][0] / w:9.2f}")
            blocked = [k for k in rows if k.startswith("blocked")][0]
            ratio = med["sweep"][0] / med[blocked][0]
            cratio = med["sweep"][1] / med[blocked][1]
            print(f"blocked / single sweep: {ratio:.2f} (wall), {cratio:.2f} (CPU time)")
            results[(n, th)] = ratio
        del u, out
    key = (256, 2) if (256, 2) in results else list(results)[-1]
    print(f"speedup {results[key]:.2f} at {key[1]} threads, {key[0]}^3")


if __name__ == "__main__":
    main()

"""Temporal blocking against the single sweep and the copy bandwidth, at equal threads (issue 23).

Run: nice -n 10 .venv/bin/python bench/stencil_blocking.py [--sizes 256 512] [--threads 1 2]
     [--points 7|27] [--incache N [--against REV]]

For each grid of N^3 cells (double precision, fixed boundary layer) and each thread count, in one
process and at the same numba thread count for every row:

* ``copy``: a parallel numba copy of the padded grid (``prange`` over planes): the bandwidth
  limit of any kernel that sweeps the grid once per step (16 B per cell update, read + write);
* ``sweep``: the best single-sweep kernel (:func:`hpcsuite.accel.kernels.stencil7`, or
  ``stencil27`` with ``--points 27``; numba);
* ``blocked``: :func:`hpcsuite.accel.temporal.stencil7_steps` (``stencil27_steps``), T steps per
  pass, with T and the tile width chosen by a short timing (CPU time, best of 2) among T in
  {2, 4, 8} x tile in {16, 32, 64} (printed).

``--incache N`` first times the kernels on a small grid of N^3 cells (e.g. 48: both copies fit in
the caches) as nanoseconds per cell update, at T = 4 and tile 16, the same rows interleaved, each
first in turn (medians and bests of 3 x ``--repeat`` timings of about 4e5 updates each): the cost
of the plane update itself. ``--against REV`` adds the blocked kernel of the git revision REV
(its ``hpcsuite/accel/temporal.py`` loaded beside the current one) to those rows, checks that both
give the same bits, and prints the ratio: a before/after of a kernel change in one process.
``--sizes`` with no value skips the large grids.

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
p.add_argument("--sizes", type=int, nargs="*", default=[256, 512])
p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
p.add_argument("--repeat", type=int, default=7, help="interleaved repetitions per row (medians)")
p.add_argument("--blocks", type=int, nargs="+", default=[2, 4, 8])
p.add_argument("--tiles", type=int, nargs="+", default=[16, 32, 64])
p.add_argument("--points", type=int, choices=[7, 27], default=7, help="the 7- or the 27-point stencil")
p.add_argument("--incache", type=int, default=0, metavar="N",
               help="also time ns per cell update on N^3 cells (in cache), T = 4, tile 16 (0: not)")
p.add_argument("--against", metavar="REV", help="with --incache: also the blocked kernel of git revision REV")
args = p.parse_args()
if args.against and not args.incache:
    p.error("--against needs --incache N")

C7 = (0.4, 0.1, 0.12, 0.08)         # c0 + 2 (cx + cy + cz) = 1: a stable, bounded Jacobi/heat step
W27 = (0.3, 0.05, 0.025, 0.0125)    # w0 + 6 wf + 12 we + 8 wc = 1: the same for 27 points


def sweep(u, out):
    """One single sweep of the chosen stencil over the interior."""
    if args.points == 7:
        kernels.stencil7(u, out, *C7)
    else:
        kernels.stencil27(u, out, W27)


def steps(mod, u, out, regs, tile):
    """len(regs) blocked steps of the chosen stencil (``mod``: hpcsuite.accel.temporal or another
    revision of it)."""
    if args.points == 7:
        mod.stencil7_steps(u, out, *C7, regs, tile=tile)
    else:
        mod.stencil27_steps(u, out, W27, regs, tile=tile)


def temporal_at(rev):
    """hpcsuite/accel/temporal.py of git revision ``rev``, imported as a module of its own (its
    relative imports made absolute, so it runs on the current kernels and backends)."""
    import importlib.util
    import subprocess
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = subprocess.run(["git", "-C", root, "show", f"{rev}:hpcsuite/accel/temporal.py"], check=True,
                         capture_output=True, text=True).stdout
    src = (src.replace("from ..runtime.", "from hpcsuite.runtime.").replace("from . import ", "from hpcsuite.accel import ")
           .replace("from .backend ", "from hpcsuite.accel.backend "))
    folder = tempfile.mkdtemp(prefix="stencil_blocking_")
    path = os.path.join(folder, "temporal_at_rev.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("temporal_at_rev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, folder


def in_cache(n, rev_mod):
    """ns per cell update on n^3 cells, the rows interleaved, at each thread count."""
    T, tile = 4, 16
    u = np.random.default_rng(0).random((n + 2,) * 3)
    out, out2 = np.zeros_like(u), np.zeros_like(u)
    regs = [((1, n + 1),) * 3] * T
    rows = {"sweep": (1, lambda: sweep(u, out)),
            f"blocked T={T} tile={tile}": (T, lambda: steps(temporal, u, out, regs, tile))}
    if rev_mod is not None:
        # (the same output array as the current kernel's: another one may alias u differently in the cache)
        rows[f"blocked at {args.against}"] = (T, lambda: steps(rev_mod, u, out, regs, tile))
    reps = max(args.repeat, 3) * 3
    for th in args.threads:
        kernels.set_cpu_threads(th)
        for _, fn in rows.values():
            fn()
        if rev_mod is not None:
            steps(temporal, u, out, regs, tile)
            steps(rev_mod, u, out2, regs, tile)
            same = bool(np.array_equal(out, out2))
        wall = {k: [] for k in rows}
        cpu = {k: [] for k in rows}
        names = list(rows)
        for r in range(reps):
            for name in names[r % len(names):] + names[:r % len(names)]:   # each row first in turn
                nsteps, fn = rows[name]
                calls = max(1, int(4e5 // (n ** 3 * nsteps)))      # at least ~4e5 updates per timing
                w, c = timed(lambda: [fn() for _ in range(calls)])
                wall[name].append(w / (calls * nsteps * n ** 3) * 1e9)
                cpu[name].append(c / (calls * nsteps * n ** 3) * 1e9)
        print(f"## in cache: {n}^3 cells, {args.points}-point, {th} thread(s), medians of {reps} interleaved "
              f"repetitions (load average {os.getloadavg()[0]:.2f})")
        print(f"{'row':>26} {'ns/update wall':>15} {'ns/update CPU':>14} {'best wall':>10} {'best CPU':>9}")
        med = {k: (statistics.median(wall[k]), statistics.median(cpu[k]), min(wall[k]), min(cpu[k])) for k in rows}
        for name, (w, c, bw, bc) in med.items():
            print(f"{name:>26} {w:15.3f} {c:14.3f} {bw:10.3f} {bc:9.3f}")
        if rev_mod is not None:
            new, old = med[f"blocked T={T} tile={tile}"], med[f"blocked at {args.against}"]
            print(f"blocked at {args.against} / current: {old[0] / new[0]:.2f} (wall), {old[1] / new[1]:.2f} "
                  f"(CPU time); best of each: {old[2] / new[2]:.2f} (wall), {old[3] / new[3]:.2f} (CPU); "
                  f"same bits: {same}")


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
    if args.incache:
        rev_mod, folder = temporal_at(args.against) if args.against else (None, None)
        try:
            in_cache(args.incache, rev_mod)
        finally:
            if folder:
                import shutil
                shutil.rmtree(folder, ignore_errors=True)
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
                    fn = lambda regs=regs, tile=tile: steps(temporal, u, out, regs, tile)  # noqa: E731
                    fn()
                    t = min(timed(fn)[1] for _ in range(2)) / T      # CPU time: steadier under load
                    if best is None or t < best[0]:
                        best = (t, T, tile)
            _, T, tile = best
            regs = [((1, n + 1),) * 3] * T
            rows = {
                "copy": (1, lambda: parallel_copy(u, out)),
                "sweep": (1, lambda: sweep(u, out)),
                f"blocked T={T} tile={tile}": (T, lambda: steps(temporal, u, out, regs, tile)),
            }
            for _, fn in rows.values():
                fn()                                       # compile / load, first touch
            wall = {k: [] for k in rows}
            cpu = {k: [] for k in rows}
            for _ in range(args.repeat):
                for name, (nsteps, fn) in rows.items():
                    w, c = timed(fn)
                    wall[name].append(w / nsteps)
                    cpu[name].append(c / nsteps)
            load = os.getloadavg()[0]
            print(f"## {n}^3 cells, {args.points}-point, {th} thread(s) (load average {load:.2f})")
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
    if results:
        key = (256, 2) if (256, 2) in results else list(results)[-1]
        print(f"speedup {results[key]:.2f} at {key[1]} threads, {key[0]}^3")


if __name__ == "__main__":
    main()

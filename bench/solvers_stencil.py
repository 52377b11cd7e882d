"""Fused stencil kernels against memory bandwidth, and deep halos against depth-1 halos.

Run: mpiexec -n 1 .venv/bin/python bench/solvers_stencil.py     (a and b)
     mpiexec -n 4 .venv/bin/python bench/solvers_stencil.py     (b only; also -n 2)

(a) 1 rank: a 7-point stencil step over N^3 cells (default 256^3) moves at least 16 bytes per lattice
    update (read u, write out). Lattice updates per second x 16 B are printed as a fraction of the
    bandwidth of a copy at the same thread count (a numba ``prange`` copy of the padded grid, read +
    write counted) measured in the same run: every row is compared with a copy using as many
    threads as it does. Rows: the numba kernels at 1 thread and at all of this rank's cores, and
    at 1 thread (as NumPy runs) the portable array-API expression on NumPy and the in-place NumPy
    ufunc sequence heat3d used before, with their time relative to the 1-thread numba kernel.
    Goal: numba >= 0.5 of the copy at equal threads.
(b) every rank count: StencilSolver (7-point, periodic) on a M^3 field (default 128^3) for S steps
    (default 32) at depth k = 1, 2, 4, 8: halo exchanges, messages sent (all ranks), bytes of halo
    received per rank and exchange, and time per step of the stepping loop (halo + stencil, slowest
    rank, median of 5), relative to k = 1.

Options: --n N (a), --m M and --steps S (b), --kind 7|27 (b).
"""
import argparse
import statistics

import numba
import numpy as np
from mpi4py import MPI

from common import COMM, Table, timeit_local
from hpcsuite.accel import kernels
from hpcsuite.runtime import Timers
from hpcsuite.solvers import StencilSolver, heat_coeffs

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--n", type=int, default=256, help="cells per side for (a)")
p.add_argument("--m", type=int, default=128, help="cells per side for (b)")
p.add_argument("--steps", type=int, default=32, help="steps for (b)")
p.add_argument("--kind", default="7", choices=("7", "27"))
args = p.parse_args()

C7 = heat_coeffs(1.0, 1e-6, (1 / 256,) * 3)
W27 = (0.3, 0.05, 0.025, 0.0125)


@numba.njit(parallel=True, cache=True)
def parallel_copy(a, b):  # pragma: no cover - compiled
    for i in numba.prange(a.shape[0]):
        b[i] = a[i]


def inplace_ufuncs(u, out, tmp, c):
    """heat3d's step before the fused kernels: in-place ufuncs, one temporary reused."""
    core = u[1:-1, 1:-1, 1:-1]
    np.multiply(core, c[0], out=out)
    for ax, cd in enumerate(c[1:]):
        hi, lo = [slice(1, -1)] * 3, [slice(1, -1)] * 3
        hi[ax], lo[ax] = slice(2, None), slice(None, -2)
        np.add(u[tuple(hi)], u[tuple(lo)], out=tmp)
        tmp *= cd
        out += tmp


def part_a(n: int) -> None:
    u = np.random.default_rng(1).random((n + 2,) * 3)
    out = np.zeros_like(u)
    cells = n ** 3
    threads = kernels.cpu_threads(1)
    counts = sorted({1, threads})
    copy_bw = {}
    for th in counts:
        kernels.set_cpu_threads(th)
        copy_bw[th] = 2 * u.nbytes / timeit_local(lambda: parallel_copy(u, out), repeat=7, warmup=2)
    rows = []
    for label, th, fn in [
        ("numba stencil7", 1, lambda: kernels.stencil7(u, out, *C7)),
        ("numba stencil7", threads, lambda: kernels.stencil7(u, out, *C7)),
        ("numba stencil27", 1, lambda: kernels.stencil27(u, out, W27)),
        ("numba stencil27", threads, lambda: kernels.stencil27(u, out, W27)),
        ("portable stencil7 (array-API slicing on NumPy)", 1, lambda: kernels.stencil7(u, out, *C7, impl="portable")),
        ("NumPy in-place ufuncs (heat3d before)", 1, None),
    ]:
        if any(r[:2] == (label, th) for r in rows):
            continue                       # (1 thread per rank: the two numba rows are one)
        kernels.set_cpu_threads(th)
        if fn is None:
            o, tmp = np.empty((n,) * 3), np.empty((n,) * 3)
            fn = lambda: inplace_ufuncs(u, o, tmp, C7)   # noqa: E731
        t = timeit_local(fn, repeat=7, warmup=2)
        rows.append((label, th, t))
    kernels.set_cpu_threads(threads)
    base = [t for label, th, t in rows if label == "numba stencil7" and th == 1][0]
    bws = ", ".join(f"{th} thread(s) {bw / 1e9:.2f} GB/s" for th, bw in copy_bw.items())
    tab = Table(f"(a) stencil step on {n}^3 cells vs a parallel copy at the same threads ({bws}; read+write, "
                f"median of 7)", ["kernel", "threads", "ms/step", "GLUP/s", "16 B x LUP/s / copy, same threads",
                                  "time / numba stencil7 at 1 thread"])
    for label, th, t in rows:
        tab.add(label, th, t * 1e3, cells / t / 1e9, cells / t * 16 / copy_bw[th], t / base)
    tab.show()


def part_b(m: int, steps: int, kind: str) -> None:
    shape = (m, m, m)
    coeffs = C7 if kind == "7" else W27
    u0 = lambda sl: np.random.default_rng(2).random(tuple(s.stop - s.start for s in sl))   # noqa: E731
    rows = {}
    for k in (1, 2, 4, 8):
        try:
            s = StencilSolver(shape, kind, coeffs, depth=k, block=1)     # single sweeps: the halo's effect
        except ValueError:
            continue                      # deeper than the smallest block
        s.run(u0, k).free()               # warm-up: kernel load, window pool, first touch
        samples = []
        for _ in range(5):
            t = Timers()
            COMM.Barrier()
            s.run(u0, steps, timers=t).free()
            per_rank = np.array([t.total["halo"] + t.total["stencil"], t.total["halo"], t.total["stencil"]])
            COMM.Allreduce(MPI.IN_PLACE, per_rank, op=MPI.MAX)
            samples.append(per_rank / steps)
        loop, halo, sten = (statistics.median(x[i] for x in samples) for i in range(3))
        n = s.pattern.local_shape(COMM.Get_rank())
        ghost = int(np.prod([x + 2 * k for x in n]) - np.prod(n)) * 8     # halo bytes per exchange
        rows[k] = (s.stats.exchanges, COMM.allreduce(s.stats.messages, op=MPI.SUM),
                   COMM.allreduce(ghost, op=MPI.MAX), loop, halo, sten)
    grid = "x".join(map(str, StencilSolver(shape, kind, coeffs).grid))
    tab = Table(f"(b) deep halo, {kind}-point, {m}^3, {steps} steps, grid {grid} "
                f"(loop time per step, slowest rank, median of 5)",
                ["depth k", "exchanges", "messages (all ranks)", "halo bytes/exchange (max rank)",
                 "ms/step", "halo ms/step", "stencil ms/step", "speed-up vs k=1"])
    base = rows[1][3]
    for k, (ex, msgs, gb, loop, halo, sten) in rows.items():
        tab.add(k, ex, msgs, gb, loop * 1e3, halo * 1e3, sten * 1e3, base / loop)
    tab.show()


if COMM.Get_size() == 1:
    part_a(args.n)
part_b(args.m, args.steps, args.kind)

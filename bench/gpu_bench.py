"""The GPU path against the CPU on the same machine: stencil kernels, the deep-halo stencil solver,
distributed SpMM and LOBPCG, and (when present) the LES time step. One process, one GPU.

    python bench/gpu_bench.py            # every part; prints a table of times and GPU/CPU ratios
    python bench/gpu_bench.py --quick    # smaller sizes (a functional run, e.g. on a CPU machine)

The CPU side uses all of this machine's cores (numba threads, multithreaded BLAS), so the ratio is
"one GPU against one full CPU node". Each time is the median of several runs after a warm-up, with
the GPU synchronised before the clock stops. Without a usable GPU every GPU row says why and only
the CPU times are printed, so the script also runs (and is tested) on CPU-only machines.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from hpcsuite.accel import get_backend, kernels
from hpcsuite.runtime import Team, gpu_status
from hpcsuite.runtime.malloc import keep_freed_memory
from hpcsuite.solvers import DistCSR, StencilSolver, heat_coeffs, lobpcg


def median_time(fn, sync, repeat: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def stencil_kernel(backend: str, n: int):
    be = get_backend(backend)
    u = be.asarray(np.random.default_rng(0).random((n + 2, n + 2, n + 2)))
    out = be.zeros(u.shape)
    c = heat_coeffs(1.0, 1e-6, (1 / n,) * 3)
    reg = ((1, n + 1),) * 3
    t = median_time(lambda: kernels.stencil7(u, out, *c, region=reg), be.synchronize)
    return n ** 3 / t                                     # lattice updates per second


def stencil_against_copy(backend: str, n: int, repeat: int = 7):
    """The 7-point stencil kernel's effective bandwidth as a fraction of a plain device copy's,
    both measured in this run and interleaved (stencil, copy, stencil, copy, ...), so that clock
    and load drifts hit both alike: the median over repetitions of
    (16 B per updated cell / stencil time) / (bytes read + written by the copy / copy time).
    Returns ``(fraction, stencil cell/s, copy B/s)``."""
    be = get_backend(backend)
    u = be.asarray(np.random.default_rng(0).random((n + 2, n + 2, n + 2)))
    out = be.zeros(u.shape)
    dst = be.zeros(u.shape)
    c = heat_coeffs(1.0, 1e-6, (1 / n,) * 3)
    reg = ((1, n + 1),) * 3
    sweep = lambda: kernels.stencil7(u, out, *c, region=reg)     # noqa: E731
    copy = lambda: be.xp.copyto(dst, u)                           # noqa: E731
    fracs, lups, bws = [], [], []
    for k in range(repeat + 1):
        t_s = median_time(sweep, be.synchronize, repeat=1, warmup=1 if k == 0 else 0)
        t_c = median_time(copy, be.synchronize, repeat=1, warmup=1 if k == 0 else 0)
        if k == 0:
            continue                                   # the first pair warms both up
        lups.append(n ** 3 / t_s)
        bws.append(2 * u.nbytes / t_c)
        fracs.append(16 * lups[-1] / bws[-1])
    return statistics.median(fracs), statistics.median(lups), statistics.median(bws)


def stencil_solver(backend: str, n: int, steps: int):
    team = Team.world()
    s = StencilSolver((n, n, n), "7", heat_coeffs(1.0, 1e-6, (1 / n,) * 3), team=team, depth=1,
                      backend=backend)
    from hpcsuite import pgas
    u0 = pgas.zeros((n, n, n), team=team)
    u0.local[...] = np.random.default_rng(1).random(u0.local.shape)
    be = get_backend(backend)
    # run() also copies the field in and out (host <-> device on the GPU); the steps alone are the
    # difference between a long and a short run
    t_short = median_time(lambda: s.run(u0, steps), be.synchronize, repeat=3)
    t_long = median_time(lambda: s.run(u0, 6 * steps), be.synchronize, repeat=3)
    return n ** 3 * 5 * steps / max(t_long - t_short, 1e-9)


def laplacian3d(m: int):
    import scipy.sparse as sp
    one = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    eye = sp.identity(m)
    return (sp.kron(sp.kron(one, eye), eye) + sp.kron(sp.kron(eye, one), eye)
            + sp.kron(sp.kron(eye, eye), one)).tocsr()


def spmm(backend: str, A, nvec: int):
    M = DistCSR.from_scipy(A, backend=backend)
    be = get_backend(backend)
    X = be.asarray(np.random.default_rng(2).random((M.local_rows, nvec)))
    t = median_time(lambda: M @ X, be.synchronize, repeat=7)
    return 2 * A.nnz * nvec / t                           # flop/s


def lobpcg_run(backend: str, A, k: int, iters: int):
    M = DistCSR.from_scipy(A, backend=backend)
    be = get_backend(backend)
    X = np.random.default_rng(3).random((A.shape[0], k))
    import warnings
    with warnings.catch_warnings():          # a fixed iteration count, so "not converged" is expected
        warnings.simplefilter("ignore")
        t = median_time(lambda: lobpcg(M, k, X=X, maxiter=iters, tol=1e-30), be.synchronize, repeat=3)
    return t


def les_step(backend: str, shape, steps: int):
    """Time per LES step (None if the LES package is not there)."""
    try:
        from hpcsuite.les import bench_step          # provided by hpcsuite.les when it exists
    except Exception:                                 # noqa: BLE001
        return None
    return bench_step(shape, steps=steps, device=backend)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (functional check)")
    ap.add_argument("--json", help="append results as JSON lines here")
    ap.add_argument("--no-les", action="store_true",
                    help="leave out the LES rows (bench/les_step.py --device gpu times them by part)")
    args = ap.parse_args()
    keep_freed_memory()                # the CPU side as the applications run it (runtime.malloc)
    ok, why = gpu_status()
    q = args.quick
    rows = []

    def row(name, unit, cpu, gpu, higher_is_better=True, compare=True):
        ratio = None
        if cpu and gpu and compare:
            ratio = gpu / cpu if higher_is_better else cpu / gpu
        rows.append((name, unit, cpu, gpu, ratio))
        if args.json:             # row by row: a run cut short by a time limit keeps what it measured
            with open(args.json, "a") as f:
                f.write(json.dumps(dict(zip(("bench", "unit", "cpu", "gpu", "gpu_over_cpu"),
                                            (name, unit, cpu, gpu, ratio)))) + "\n")
        print(f"{name:40s} {unit:12s} cpu {cpu if cpu is None else f'{cpu:.4g}':>10} "
              f"gpu {f'{gpu:.4g}' if gpu is not None else ('n/a' if ok else 'no GPU'):>10} "
              f"{'' if ratio is None else f'GPU {ratio:.1f}x'}", flush=True)

    def both(fn, *a):
        cpu = fn("cpu", *a)
        gpu = fn("gpu", *a) if ok else None
        return cpu, gpu

    print(f"# gpu: {'yes' if ok else 'no (' + why + ')'}; cpu cores: {os.cpu_count()}", flush=True)
    for n in ((64,) if q else (256, 512)):
        lups = both(stencil_kernel, n)
        row(f"stencil7 kernel {n}^3", "cell/s", *lups)
        # issues 4 and 26: 16 B per update (one read, one write) against a plain copy's bandwidth,
        # the two interleaved in this run (goal on the GPU: >= 0.7)
        inter = both(stencil_against_copy, n)
        print(f"# copy {n}^3 (read + write) interleaved with the stencil: cpu {inter[0][2]:.4g} B/s"
              + (f", gpu {inter[1][2]:.4g} B/s" if inter[1] else ""), flush=True)
        row(f"stencil7 {n}^3 / copy bandwidth, same run", "fraction",
            *[x[0] if x else None for x in inter], compare=False)
    for n in ((32,) if q else (256,)):
        row(f"StencilSolver 7-pt {n}^3, steps only", "cell/s", *both(stencil_solver, n, 20))
    m = 16 if q else 64
    A = laplacian3d(m)
    row(f"SpMM 3-D Laplacian {m}^3 x 16 vectors", "flop/s", *both(spmm, A, 16))
    row(f"LOBPCG {m}^3 Laplacian, k=8, 20 iterations", "s", *both(lobpcg_run, A, 8, 20),
        higher_is_better=False)
    for shape in (() if args.no_les else ((16, 16, 16),) if q else ((64, 64, 80), (512, 512, 128))):
        # one process cannot stand for a CPU node on the large grid (minutes per step): there the
        # CPU reference is bench/les_step.py with one MPI rank per core (bench/gpu_check.sh runs it)
        big = shape[0] > 256
        if big and not ok:
            print(f"LES step {'x'.join(map(str, shape))}: skipped without a GPU (CPU reference: "
                  f"mpiexec -n $(nproc) python bench/les_step.py --shape {' '.join(map(str, shape))})", flush=True)
            continue
        cpu = None if big else les_step("cpu", shape, 2 if q else 5)
        gpu = les_step("gpu", shape, 2 if q else 5) if ok else None
        if cpu is None and gpu is None:
            print(f"LES step {shape}: hpcsuite.les.bench_step not available", flush=True)
            continue
        row(f"LES step {'x'.join(map(str, shape))}", "s/step", cpu, gpu, higher_is_better=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

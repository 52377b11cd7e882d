"""hpcsuite's distributed cg/gmres vs scipy.sparse.linalg.cg/gmres, then strong scaling at 1 and 2 ranks.

    python bench/solvers_krylov.py              # both parts (starts mpiexec -n 1 and -n 2 for part 2)
    python bench/solvers_krylov.py compare      # part 1 only (1 rank)
    mpiexec -n 2 python bench/solvers_krylov.py scale   # one rank count of part 2

1. Same matrix, same right-hand side, same number of iterations (rtol = atol = 0, so both run
   exactly ``maxiter`` CG iterations / GMRES cycles of ``restart`` steps), same threads: BLAS limited
   to 1 thread on both sides with threadpoolctl. Prints the median time of each and the ratio
   hpcsuite / SciPy (goal <= 1.0). Matrices: the 3-D Dirichlet Laplacian (SciPy's LaplacianNd) for
   CG and 2-D upwind convection-diffusion for GMRES(20).
2. The same solves, larger, at 1 and 2 ranks (never more ranks than the 2 cores of the CI machine),
   matrix built with ``DistCSR.from_generator`` (each rank makes its own rows): time per solve and
   the speed-up over 1 rank.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")       # before NumPy loads OpenBLAS

import statistics                                          # noqa: E402
import subprocess                                          # noqa: E402
import sys                                                 # noqa: E402
import time                                                # noqa: E402

import numpy as np                                         # noqa: E402
import scipy.sparse as sp                                  # noqa: E402
import scipy.sparse.linalg as spl                          # noqa: E402
from scipy.sparse.linalg import LaplacianNd                # noqa: E402
from threadpoolctl import threadpool_limits                # noqa: E402

from hpcsuite.runtime import Team                          # noqa: E402
from hpcsuite.solvers import DistCSR, cg, gmres            # noqa: E402

REPEAT = 5


def laplacian(shape):
    return (-LaplacianNd(shape, boundary_conditions="dirichlet").tosparse()).astype(np.float64).tocsr()


def convection_diffusion(m, peclet=50.0):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    C = sp.diags([-1.0, 1.0], [-1, 0], shape=(m, m))
    I = sp.eye(m)
    h = 1.0 / (m + 1)
    return (sp.kron(I, T) + sp.kron(T, I) + peclet * h * (sp.kron(I, C) + sp.kron(C, I))).tocsr()


def median_time(fn, team=None) -> float:
    ts = []
    for _ in range(REPEAT):
        if team is not None:
            team.comm.Barrier()
        t = time.perf_counter()
        fn()
        t = time.perf_counter() - t
        ts.append(t if team is None else team.comm.allreduce(t, op=__import__("mpi4py").MPI.MAX))
    return statistics.median(ts)


def interleaved(ours, theirs) -> tuple[float, float]:
    """Median times of the two, run alternately (a load change on the shared cores hits both)."""
    a, b = [], []
    for _ in range(REPEAT):
        for fn, ts in ((ours, a), (theirs, b)):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b)


def compare() -> None:
    rows = []
    with threadpool_limits(limits=1):
        for name, M, method, iters in [("cg, -Laplacian 64^3", laplacian((64, 64, 64)), "cg", 200),
                                       ("cg, -Laplacian 500^2", laplacian((500, 500)), "cg", 200),
                                       ("gmres(20), conv-diff 400^2", convection_diffusion(400), "gmres", 10),
                                       ("gmres(20), conv-diff 700^2", convection_diffusion(700), "gmres", 5)]:
            A = DistCSR.from_scipy(M, root=None)
            b = M @ np.cos(0.01 * np.arange(M.shape[0]))
            if method == "cg":
                ours = lambda: cg(A, b, rtol=0.0, maxiter=iters)                      # noqa: E731
                theirs = lambda: spl.cg(M, b, rtol=0.0, maxiter=iters)                # noqa: E731
            else:
                ours = lambda: gmres(A, b, rtol=0.0, restart=20, maxiter=iters)       # noqa: E731
                theirs = lambda: spl.gmres(M, b, rtol=0.0, restart=20, maxiter=iters)  # noqa: E731
            x1, _ = ours()
            x2, _ = theirs()
            diff = float(np.max(np.abs(x1 - x2)) / np.max(np.abs(x2)))
            t_ours, t_scipy = interleaved(ours, theirs)
            rows.append((name, M.shape[0], iters, t_ours, t_scipy, diff))
    print(f"## Krylov: hpcsuite vs scipy.sparse.linalg at 1 rank, 1 BLAS thread each "
          f"(median of {REPEAT}, run alternately; same iterations: rtol = 0)")
    print("| case | n | iterations (cg) / cycles (gmres) | hpcsuite s | SciPy s | ratio | max rel. diff of x |")
    print("|---|---|---|---|---|---|---|")
    for name, n, it, a, b_, d in rows:
        print(f"| {name} | {n} | {it} | {a:.3f} | {b_:.3f} | {a / b_:.2f}x | {d:.1e} |")


def scale() -> None:
    team = Team.world()
    out = []
    with threadpool_limits(limits=1):
        for name, make, n, method, iters in [
                ("cg, -Laplacian 96^3", lambda: laplacian((96, 96, 96)), 96 ** 3, "cg", 100),
                ("gmres(20), conv-diff 1000^2", lambda: convection_diffusion(1000), 1000 ** 2, "gmres", 3)]:
            M = make()
            A = DistCSR.from_generator(n, lambda r0, r1: M[r0:r1], team=team)
            b = (M @ np.cos(0.01 * np.arange(n)))[A.row_start:A.row_stop]
            del M
            if method == "cg":
                t = median_time(lambda: cg(A, b, rtol=0.0, maxiter=iters), team)
            else:
                t = median_time(lambda: gmres(A, b, rtol=0.0, restart=20, maxiter=iters), team)
            out.append((name, n, iters, t))
    if team.rank == 0:
        for name, n, it, t in out:
            print(f"SCALE|{team.size}|{name}|{n}|{it}|{t:.4f}")


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("compare", "all"):
        compare()
    if what == "scale":
        scale()
    if what == "all":
        times = {}
        for p in (1, 2):
            mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
            res = subprocess.run([mpiexec, "-n", str(p), sys.executable, __file__, "scale"],
                                 capture_output=True, text=True, check=True)
            for line in res.stdout.splitlines():
                if line.startswith("SCALE|"):
                    _, size, name, n, it, t = line.split("|")
                    times[(name, int(size))] = (int(n), int(it), float(t))
        print(f"\n## Krylov strong scaling: 1 and 2 ranks, 1 BLAS thread per rank (median of {REPEAT})")
        print("| case | n | iterations / cycles | 1 rank s | 2 ranks s | speed-up |")
        print("|---|---|---|---|---|---|")
        for name in dict.fromkeys(k[0] for k in times):
            n, it, t1 = times[(name, 1)]
            t2 = times[(name, 2)][2]
            print(f"| {name} | {n} | {it} | {t1:.3f} | {t2:.3f} | {t1 / t2:.2f}x |")


if __name__ == "__main__":
    main()

"""hpcsuite's distributed LOBPCG vs scipy.sparse.linalg.lobpcg, then our solver at 1, 2 and 4 ranks.

    python bench/solvers_lobpcg.py                # both parts (starts mpiexec -n 1/2/4 for part 2)
    python bench/solvers_lobpcg.py compare        # part 1 only (1 rank)
    mpiexec -n 4 python bench/solvers_lobpcg.py scale   # one rank count of part 2

1. Same matrix, same starting block, same maxiter and the same tolerance: SciPy's criterion is the
   absolute residual norm of B-normalised vectors, ours is relative to ``theta_max`` (the largest
   |Ritz value|, about ||A||), so SciPy gets ``tol * theta_max`` from our run. Both results are then
   judged alike: the true relative residuals ``||A v - lambda v|| / (theta_max ||v||)`` recomputed here
   with SciPy products, and the eigenvalue error against the exact (closed-form) eigenvalues.
   Cases: cubic Laplacians with degenerate clusters, ill-conditioned diagonal matrices, a random
   sparse SPD matrix. Goal: not slower, and converged wherever SciPy is.
2. A 3-D Laplacian with a fixed number of iterations at 1, 2 and 4 ranks (the random start does not
   depend on the rank count, so every run does the same work): time and speed-up over 1 rank.

Timings: median of a few runs; BLAS is limited to one thread per rank (the ranks fill the cores).
On 2-core machines 4 ranks oversubscribe: read the 4-rank numbers as a correctness run.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")      # before NumPy loads OpenBLAS

import json                                              # noqa: E402
import statistics                                        # noqa: E402
import subprocess                                        # noqa: E402
import sys                                               # noqa: E402
import time                                              # noqa: E402
import warnings                                          # noqa: E402
from pathlib import Path                                 # noqa: E402

import numpy as np                                       # noqa: E402
import scipy.sparse as sp                                # noqa: E402
from scipy.sparse.linalg import LaplacianNd, eigsh       # noqa: E402
from scipy.sparse.linalg import lobpcg as scipy_lobpcg   # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import COMM, Table                           # noqa: E402

from hpcsuite.solvers import DistCSR, lobpcg             # noqa: E402

MAXITER = 1000


def laplacian(shape):
    L = LaplacianNd(shape, boundary_conditions="dirichlet")
    return (-L.tosparse()).astype(np.float64).tocsr(), np.sort(-L.eigenvalues())


def cases():
    """(name, matrix, k, largest, preconditioner, tol, exact eigenvalues of the wanted end)."""
    out = []
    for shape, k, largest in (((20, 20, 20), 10, False), ((20, 20, 20), 6, False),
                              ((16, 16, 16), 7, True), ((30, 30, 30), 10, False), ((100, 100), 6, False)):
        A, ev = laplacian(shape)
        out.append((f"-Laplacian {'x'.join(map(str, shape))}, k={k}{' largest' if largest else ''}",
                    A, k, largest, None, 1e-8, ev[-k:] if largest else ev[:k]))
    n = 20_000
    d = np.arange(1.0, n + 1)
    out.append(("diag(1..n), exact precond (Jacobi), k=5", sp.diags(d).tocsr(), 5, False, "jacobi", 1e-10, d[:5]))
    g = np.logspace(-6, 0, n)
    out.append(("diag(logspace(-6, 0)), Jacobi, k=5", sp.diags(g).tocsr(), 5, False, "jacobi", 1e-10, g[:5]))
    rng = np.random.default_rng(1)
    R = sp.random(n, n, 5.0 / n, random_state=rng)
    S = (R + R.T + sp.diags(np.linspace(1.0, 100.0, n))).tocsr()
    ref = np.sort(eigsh(S, 8, sigma=0.0, which="LM", tol=1e-14)[0])
    out.append(("random sparse SPD n=20000, Jacobi, k=8", S, 8, False, "jacobi", 1e-8, ref))
    return out


def true_residuals(A, lam, V, scale):
    """||A v - lambda v|| / (scale ||v||), computed with SciPy products (independent of both)."""
    return np.linalg.norm(A @ V - V * lam, axis=0) / (scale * np.linalg.norm(V, axis=0))


def run_ours(A_dist, k, X0, M, tol, largest):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = lobpcg(A_dist, k, X=X0, M=M, tol=tol, maxiter=MAXITER, largest=largest)
    return res, len(w) > 0


def run_scipy(A, X0, M, tol, largest):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        Msp = None if M is None else sp.diags(1.0 / np.abs(A.diagonal()))
        lam, V, hist = scipy_lobpcg(A, X0.copy(), M=Msp, tol=tol, maxiter=MAXITER, largest=largest,
                                    retResidualNormsHistory=True)
    order = np.argsort(lam)
    return lam[order], V[:, order], len(hist), len(w) > 0


def interleaved(fa, fb, repeat=3):
    """Median times of ``fa`` and ``fb`` run alternately (load drift on a shared machine hits both
    alike) and their last results."""
    ta, tb, ra, rb = [], [], None, None
    for _ in range(repeat):
        for f, ts in ((fa, ta), (fb, tb)):
            t0 = time.perf_counter()
            r = f()
            ts.append(time.perf_counter() - t0)
            ra, rb = (r, rb) if f is fa else (ra, r)
    return statistics.median(ta), statistics.median(tb), ra, rb


def compare() -> None:
    tab = Table("LOBPCG: hpcsuite vs scipy.sparse.linalg.lobpcg, same matrix / start / tolerance (1 rank)",
                ["problem", "n", "ours s", "SciPy s", "time ratio ours/SciPy", "ours it", "SciPy it",
                 "ours conv", "SciPy conv", "ours max rel res", "SciPy max rel res", "ours eig err",
                 "SciPy eig err"])
    for name, A, k, largest, M, tol, exact in cases():
        n = A.shape[0]
        X0 = np.random.default_rng(0).standard_normal((n, k))
        D = DistCSR.from_scipy(A, root=None, symmetric=True)
        probe, _ = run_ours(D, k, X0, M, tol, largest)          # gives SciPy's absolute tolerance
        scale = probe.theta_max
        probe.eigenvectors.free()

        def ours():
            r, w = run_ours(D, k, X0, M, tol, largest)
            V = r.eigenvectors.to_numpy()
            r.eigenvectors.free()
            return r, w, V
        t_o, t_s, (res, warned, V), (lam_s, V_s, it_s, warned_s) = interleaved(
            ours, lambda: run_scipy(A, X0, M, tol * scale, largest))
        r_o = true_residuals(A, res.eigenvalues, V, scale)
        r_s = true_residuals(A, lam_s, V_s, scale)
        e_o = np.max(np.abs(res.eigenvalues - exact) / np.abs(exact))
        e_s = np.max(np.abs(lam_s - exact) / np.abs(exact))
        conv_s = bool(np.max(r_s) <= tol * 1.01) and not warned_s
        tab.add(name, n, t_o, t_s, t_o / t_s, res.iterations, it_s, str(res.converged),
                f"{conv_s}{' (warned)' if warned_s else ''}", float(np.max(r_o)), float(np.max(r_s)),
                float(e_o), float(e_s))
    tab.show()


def scale() -> None:
    shape, k, iters = (40, 40, 40), 8, 40
    n = int(np.prod(shape))
    from hpcsuite.runtime import Team
    team = Team.world()
    A_s, _ = laplacian(shape)
    A = DistCSR.from_scipy(A_s if team.rank == 0 else None, team=team, symmetric=True)

    def once():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lobpcg(A, k, tol=1e-14, maxiter=iters)      # a fixed amount of work
    times = []
    for _ in range(3):
        COMM.Barrier()
        t0 = time.perf_counter()
        res = once()
        times.append(COMM.allreduce(time.perf_counter() - t0, op=__import__("mpi4py").MPI.MAX))
        res.eigenvectors.free()
    if team.rank == 0:
        print(json.dumps({"ranks": team.size, "n": n, "k": k, "iterations": res.iterations,
                          "seconds": statistics.median(times), "lambda0": float(res.eigenvalues[0])}))


def scale_all() -> None:
    root = Path(__file__).resolve().parents[1]
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    rows = []
    for p in (1, 2, 4):
        out = subprocess.run([mpiexec, "-n", str(p), sys.executable, __file__, "scale"], capture_output=True,
                             text=True, cwd=root, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        if out.returncode != 0:
            sys.exit(f"scale run at {p} ranks failed:\n{out.stderr}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    tab = Table(f"hpcsuite LOBPCG at 1/2/4 ranks: -Laplacian 40^3 (n = {rows[0]['n']}), k = {rows[0]['k']}, "
                f"{rows[0]['iterations']} iterations", ["ranks", "seconds", "speed-up over 1 rank", "lambda_0"])
    for r in rows:
        assert r["iterations"] == rows[0]["iterations"]
        tab.add(r["ranks"], r["seconds"], rows[0]["seconds"] / r["seconds"], r["lambda0"])
    tab.show()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    if mode == "scale":
        scale()
    else:
        if COMM.Get_size() != 1:
            sys.exit("run the comparison on 1 rank (the 'scale' mode is the MPI part)")
        compare()
        if mode == "all":
            scale_all()

"""hpcsuite's 3-D Poisson solve vs mpi4py-fft and a raw mpi4py + scipy.fft solve, at 1 and 2 ranks.

    bench/setup_mpi4py_fft_env.sh         # once: ~/.cache/hpcsuite/venv-mpi4py-fft (mpi4py-fft on FFTW)
    ~/.cache/hpcsuite/venv-mpi4py-fft/bin/python bench/solvers_poisson.py      # mpiexec -n 1, then -n 2
    .venv/bin/mpiexec -n 2 ~/.cache/hpcsuite/venv-mpi4py-fft/bin/python bench/solvers_poisson.py run [N ...]

Same grid (N^3 cells, float64), same ranks, one thread per rank on every side (OMP/MKL/OPENBLAS
threads = 1 before NumPy loads; scipy.fft runs with workers=1, mpi4py-fft's FFTW with threads=1):

* ``hpcsuite``: :class:`hpcsuite.solvers.PoissonSolver`, periodic x and y, Neumann walls in z: real
  FFT + complex FFT (scipy.fft), one tridiagonal solve per horizontal wavenumber, inverse; slabs
  (MPI's 2 x 1 grid at 2 ranks: the blocks already hold whole y-lines, two ``pgas.copy``
  redistributions per solve). Its DistArray in the solver's layout (no extra copies).
* ``hpcsuite DST``: the same with Dirichlet x and y (DST-II in x and y, real spectra).
* ``mpi4py-fft``: ``PFFT(comm, (N, N, N), dtype=float64, slab=True)`` (FFTW, its own
  ``Alltoallw`` transposes): forward real 3-D FFT, divide by ``-|k|^2``, backward. A periodic 3-D
  spectral Poisson solve: the same transform size, an FFT instead of the tridiagonal solve in z.
* ``raw``: the same periodic spectral solve written with mpi4py and scipy.fft only (x-slabs,
  ``rfft`` along z and ``fft`` along y locally, one ``Alltoall`` to y-slabs, ``fft`` along x, and
  back): the floor a hand-written code reaches with the same FFT library as hpcsuite.

Each repetition times every contender once, in rotating order (a load change on shared cores hits
all of them); a sample is the slowest rank's time after a barrier; medians are printed, and the
ratios hpcsuite / peer. When mpi4py_fft is not importable its column says why.
"""
import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"                                  # before NumPy loads a BLAS

import statistics                                          # noqa: E402
import subprocess                                          # noqa: E402
import sys                                                 # noqa: E402
import time                                                # noqa: E402

import numpy as np                                         # noqa: E402
import scipy.fft as sfft                                   # noqa: E402
from mpi4py import MPI                                     # noqa: E402

SIZES = (64, 128)
REPEAT = {64: 15, 128: 9}
WARMUP = 2


def ours(n, bc):
    from hpcsuite.runtime import Team
    from hpcsuite.solvers import PoissonSolver
    s = PoissonSolver((n, n, n), (1.0 / n,) * 3, bc=bc, team=Team.world(), singular="project")
    f = s.zeros()
    i, j, k = f.local_global_indices()
    f.local[...] = np.cos(2 * np.pi * i / n) * np.cos(2 * np.pi * j / n) * np.cos(np.pi * (k + 0.5) / n)
    out = s.zeros()
    s.solve(f, out=out)
    if bc[0] == "periodic":                      # a discrete eigenmode: the exact discrete solution
        lam = -(4 * np.sin(np.pi / n) ** 2 * 2 + 4 * np.sin(np.pi / (2 * n)) ** 2) * n * n
        err = np.abs(out.local - f.local / lam).max() if f.local.size else 0.0
        assert Team.world().allreduce(err, op=MPI.MAX) < 1e-12, err
    return (lambda: s.solve(f, out=out)), (s, f, out)


def mpi4py_fft(comm, n):
    try:
        from mpi4py_fft import PFFT, newDistArray
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return None, f"not importable ({type(exc).__name__}: {exc}); run bench/setup_mpi4py_fft_env.sh"
    fft = PFFT(comm, (n, n, n), dtype=np.float64, slab=True, threads=1)
    u = newDistArray(fft, False)
    uh = newDistArray(fft, True)
    k = [np.fft.fftfreq(n, 1.0 / n)] * 2 + [np.fft.rfftfreq(n, 1.0 / n)]
    ks = [kk[sl] for kk, sl in zip(k, fft.local_slice(True))]
    k2 = ks[0][:, None, None] ** 2 + ks[1][None, :, None] ** 2 + ks[2][None, None, :] ** 2
    inv = np.where(k2 == 0, 0.0, -1.0 / np.where(k2 == 0, 1.0, k2 * (2 * np.pi) ** 2))
    f = newDistArray(fft, False)
    i, j, kz = (np.arange(n)[sl] for sl in fft.local_slice(False))
    f[...] = np.cos(2 * np.pi * i / n)[:, None, None] * np.cos(2 * np.pi * j / n)[None, :, None] \
        * np.cos(2 * np.pi * kz / n)[None, None, :]

    def solve():
        fft.forward(f, uh)
        np.multiply(uh, inv, out=uh)
        fft.backward(uh, u)
    solve()
    err = np.abs(u + f / (12 * np.pi ** 2)).max()                 # the exact solution of this mode
    assert comm.allreduce(err, op=MPI.MAX) < 1e-12, err
    return solve, "FFTW (slab)"


def raw(comm, n):
    """Periodic spectral Poisson with mpi4py + scipy.fft, x-slabs <-> y-slabs by one Alltoall."""
    P, r = comm.size, comm.rank
    if n % P:
        return None
    m, nh = n // P, n // 2 + 1
    kx = np.fft.fftfreq(n, 1.0 / n)
    ky = np.fft.fftfreq(n, 1.0 / n)[r * m:(r + 1) * m]
    kz = np.fft.rfftfreq(n, 1.0 / n)
    k2 = (kx[:, None, None] ** 2 + ky[None, :, None] ** 2 + kz[None, None, :] ** 2) * (2 * np.pi) ** 2
    inv = np.where(k2 == 0, 0.0, -1.0 / np.where(k2 == 0, 1.0, k2))
    x = np.arange(n) / n
    u = (np.cos(2 * np.pi * x[r * m:(r + 1) * m, None, None]) * np.cos(2 * np.pi * x[None, :, None])
         * np.cos(2 * np.pi * x[None, None, :]))
    send = np.empty((P, m, m, nh), np.complex128)
    recv = np.empty_like(send)

    def transpose(a, back):
        # forward: a (m, n, nh) x-slab -> (n, m, nh) y-slab; back: the reverse
        if P == 1:
            return a
        if not back:
            send[...] = a.reshape(m, P, m, nh).transpose(1, 0, 2, 3)
        else:
            send[...] = a.reshape(P, m, m, nh)
        comm.Alltoall(send, recv)
        return recv.reshape(n, m, nh).copy() if not back else \
            np.ascontiguousarray(recv.transpose(1, 0, 2, 3).reshape(m, n, nh))

    def solve():
        a = sfft.fft(sfft.rfft(u, axis=2), axis=1)
        b = sfft.fft(transpose(a, False), axis=0)
        b *= inv
        a = transpose(sfft.ifft(b, axis=0), True)
        return sfft.irfft(sfft.ifft(a, axis=1), n=n, axis=2)
    err = np.abs(solve() + u / (12 * np.pi ** 2)).max()          # the exact solution of this mode
    assert comm.allreduce(err, op=MPI.MAX) < 1e-12, err
    return solve


def run(sizes) -> None:
    comm = MPI.COMM_WORLD
    P = comm.size
    rows = []
    for n in sizes:
        cont, keep = {}, []
        cont["hpcsuite"], k1 = ours(n, ("periodic", "periodic", "neumann"))
        cont["hpcsuite DST"], k2 = ours(n, ("dirichlet", "dirichlet", "neumann"))
        keep += [k1, k2]
        fn, why = mpi4py_fft(comm, n)
        if fn is not None:
            cont["mpi4py-fft"] = fn
        r = raw(comm, n)
        if r is not None:
            cont["raw mpi4py+scipy.fft"] = r
        names = list(cont)
        for fn in cont.values():
            for _ in range(WARMUP):
                fn()
        samples = {k: [] for k in names}
        for rep in range(REPEAT.get(n, 9)):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                comm.Barrier()
                t0 = time.perf_counter()
                cont[name]()
                samples[name].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        med = {k: statistics.median(v) for k, v in samples.items()}
        rows.append((n, P, med, why))
        for s, *arrays in keep:
            for a in arrays:
                a.free()
            s.free()
    if comm.rank == 0:
        for n, P, med, why in rows:
            print(f"N = {n}^3, {P} rank(s), 1 thread each: median ms per solve")
            for k, v in med.items():
                print(f"  {k:22s} {1e3 * v:9.2f}")
            if "mpi4py-fft" not in med:
                print(f"  {'mpi4py-fft':22s} {why}")
            base = med["hpcsuite"]
            ratios = ", ".join(f"/ {k} = {base / v:.2f}" for k, v in med.items() if k != "hpcsuite")
            print(f"  ratios hpcsuite {ratios}")
        sys.stdout.flush()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        run([int(a) for a in sys.argv[2:]] or SIZES)
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mpiexec = os.environ.get("MPIEXEC", os.path.join(root, ".venv", "bin", "mpiexec"))
    for nranks in (1, 2):
        print(f"=== {nranks} rank(s) ===", flush=True)
        subprocess.run([mpiexec, "-n", str(nranks), sys.executable, os.path.abspath(__file__), "run"],
                       check=True)


if __name__ == "__main__":
    main()

"""Host <-> device copies made by the GPU code paths, counted on the CuPy stand-in (tests/fakegpu,
which records every copy; a real CuPy does not). What an OpenACC port checks with its data regions:
inside a time step or iteration nothing field-sized should cross.

    PYTHONPATH=tests/fakegpu mpiexec -n 1 python bench/gpu_residency.py
    PYTHONPATH=tests/fakegpu mpiexec -n 2 python bench/gpu_residency.py
    HPCSUITE_GPU_AWARE_MPI=1 PYTHONPATH=tests/fakegpu mpiexec -n 2 python bench/gpu_residency.py
"""
from __future__ import annotations

import sys

import numpy as np


def main() -> int:
    try:
        from cupy import _core as fake
        fake.transfers
    except (ImportError, AttributeError):
        print("needs the CuPy stand-in: PYTHONPATH=tests/fakegpu (a real CuPy does not count copies)")
        return 2
    from scipy.sparse.linalg import LaplacianNd

    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team, gpu_aware_mpi
    from hpcsuite.solvers import DistCSR, StencilSolver, heat_coeffs, lobpcg
    from mpi4py import MPI
    team = Team.world()
    max_op = MPI.MAX
    rows = []

    def count(name, fn, per=1):
        team.barrier()
        fake.transfers.clear()
        fn()
        moved = list(fake.transfers)
        out = [m for m in moved if m[0] == "to_host"]
        back = [m for m in moved if m[0] == "to_device"]
        worst = team.comm.allreduce(max((b for _, b in moved), default=0), op=max_op)
        n = team.comm.allreduce(len(moved), op=max_op)
        rows.append((name, per, n / per, sum(b for _, b in out) / per, sum(b for _, b in back) / per, worst))

    m = bomex_like((32, 32, 32), team, device="gpu")
    m.step()
    count("LES step, BOMEX-like 32^3, every physics term", lambda: [m.step() for _ in range(3)], per=3)
    m.free()
    n = 32
    s = StencilSolver((n, n, n), "7", heat_coeffs(1.0, 1e-4, (1 / n,) * 3), depth=2, backend="gpu")
    u0 = np.random.default_rng(1).random((n, n, n))
    count("stencil 7-pt 32^3, 16 steps incl. start field", lambda: s.run(u0, 16).free(), per=16)
    L = LaplacianNd((12, 12, 12), boundary_conditions="dirichlet")
    A = DistCSR.from_scipy((-L.tosparse()).astype(float).tocsr(), root=None, symmetric=True, backend="gpu")
    its = []

    def solve():
        r = lobpcg(A, 6, tol=1e-7)
        its.append(r.iterations)
        r.eigenvectors.free()
    count("LOBPCG 12^3 Laplacian, k=6, whole solve", solve)
    if team.rank == 0:
        aware = "CUDA-aware MPI (device buffers to MPI)" if gpu_aware_mpi() else "MPI without GPU support (staged)"
        print(f"## host<->device copies per step/solve on the CuPy stand-in, {team.size} rank(s), {aware}")
        print(f"{'what':52s} {'copies':>8s} {'B to host':>10s} {'B to dev':>10s} {'largest B':>10s}")
        for name, per, ncop, bout, bback, worst in rows:
            print(f"{name:52s} {ncop:8.1f} {bout:10.0f} {bback:10.0f} {worst:10d}")
        print(f"(LOBPCG: {its[0]} iterations; its row is the whole solve)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cost of interception per kernel call: a trivial computation kernel and an 8-double Allreduce,
called directly, through the hooks with no tuner, and under the tuner's profile/selective modes.

    mpiexec -n 2 .venv/bin/python bench/tune_overhead.py
"""
import time, numpy as np
from mpi4py import MPI
from hpcsuite.runtime import compute, Team
from hpcsuite.tune import Model
from hpcsuite.tune.execution import Execution
team = Team.world()
a = np.zeros(8)
def f(x): x += 1.0
N = 20000
t0 = time.perf_counter()
for _ in range(N): f(a)
direct = (time.perf_counter() - t0) / N
t0 = time.perf_counter()
for _ in range(N): compute("k", (8,), f, a)
hooked_off = (time.perf_counter() - t0) / N
res = {}
for mode in ("profile", "selective"):
    m = Model(0.05, 0.95, 3)
    with Execution(m, mode, MPI.COMM_WORLD):
        t0 = time.perf_counter()
        for _ in range(N): compute("k", (8,), f, a)
        res[mode] = (time.perf_counter() - t0) / N
buf = np.zeros(8)
t0 = time.perf_counter()
for _ in range(2000): team.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
ar = (time.perf_counter() - t0) / 2000
with Execution(Model(0.05, 0.95, 3), "profile", MPI.COMM_WORLD):
    t0 = time.perf_counter()
    for _ in range(2000): team.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    ar_p = (time.perf_counter() - t0) / 2000
if team.rank == 0:
    print(f"trivial kernel: direct {direct*1e6:.2f} us, compute() no tuner {hooked_off*1e6:.2f} us, "
          f"profile {res['profile']*1e6:.2f} us, selective {res['selective']*1e6:.2f} us per call")
    print(f"Allreduce 8 doubles: direct {ar*1e6:.2f} us, under profile {ar_p*1e6:.2f} us")

"""Example 5: tuning your own kernel and your own MPI communication.

Shows: a user kernel made visible to ``hpcsuite.tune`` with ``@hpcsuite.runtime.kernel`` and user
MPI code made visible by sending it through a ``Team`` wrapped around your own mpi4py communicator.
An ``Autotuner`` searches the chunk size of a smoothing sweep in ``selective`` mode: once a kernel's
time is known to the requested confidence it is skipped and its mean charged instead. Checked: the
tuner saw both the kernel and the Allreduce, every configuration ran, and the program's result (one
full run of the best configuration) matches NumPy.

Launch:  mpiexec -n 2 python examples/05_tune_own_kernel.py
"""
import numpy as np
from mpi4py import MPI

from hpcsuite.runtime import Team, install_abort_hook, kernel
from hpcsuite.tune import Autotuner, Space

install_abort_hook()
comm = MPI.COMM_WORLD.Dup()                    # "your own" communicator
team = Team(comm)                              # its calls now go through the observed layer
m = 1 << 14                                    # local elements per rank
rng = np.random.default_rng(team.rank)
u0 = rng.random(m)


@kernel("smooth", key=lambda u, out, lo, hi: (hi - lo,))   # same key = same expected cost
def smooth(u, out, lo, hi):
    out[lo:hi] = 0.5 * u[lo:hi] + 0.25 * (u[lo - 1:hi - 1] + u[lo + 1:hi + 1])


def program(config, sweeps=4):
    chunk = config["chunk"]
    u = np.pad(u0, 1)                          # one ghost cell at each end (zero)
    out = u.copy()
    total = np.zeros(1)
    for _ in range(sweeps):
        for lo in range(1, m + 1, chunk):
            smooth(u, out, lo, min(lo + chunk, m + 1))
        u, out = out, u
        team.Allreduce(np.array([u[1:-1].sum()]), total)   # a global sum, observed
    return u[1:-1], total[0]


tuner = Autotuner(Space({"chunk": [1024, 4096, 16384]}), program, strategy="grid", comm=comm,
                  iterations=3, tolerance=0.2)
res = tuner.tune()                             # collective; the same result on every rank
names = {str(k[1]) for k in tuner.model.kernels}        # keys: ("comp" | "comm", name, ...)
print_ = print if team.rank == 0 else (lambda *a, **k: None)
print_(res.table())

# --- check: the program with the chosen configuration, run plainly, against NumPy
u, total = program(res.best_config)
ref = u0.copy()
for _ in range(4):
    p = np.pad(ref, 1)
    ref = 0.5 * p[1:-1] + 0.25 * (p[:-2] + p[2:])
ok = np.allclose(u, ref, rtol=0, atol=1e-14) and np.isclose(total, comm.allreduce(ref.sum()))
ok = comm.allreduce(ok, op=MPI.LAND)
seen = "smooth" in names and "Allreduce" in names
print_(f"tuning on {team.size} ranks: best {res.best_config}, kernels seen {sorted(names)}, "
       f"skipped fraction {res.skipped_fraction:.2f}; result matches NumPy: {ok}")
print_("VERIFIED" if ok and seen and all(r.status == "ok" for r in res.results) else "FAILED")

"""Example 2: an implicit heat step with a Krylov solver on a distributed sparse matrix, HDF5 output.

Shows: backward Euler for du/dt = nu * laplacian(u) on the unit square (Dirichlet walls):
every step solves (I + dt nu A) u_new = u_old with conjugate gradients (``hpcsuite.solvers.cg``,
Jacobi-preconditioned) on a ``DistCSR`` whose rows each rank generates itself; the result goes to
HDF5 through a 1-D ``pgas`` array with the same row blocks. Verified against the exact decay of the
discrete eigenmode sin(pi x) sin(pi y), and against SciPy's direct solver on rank 0.

Launch:  mpiexec -n 2 python examples/02_implicit_heat_cg.py [--out DIR] [--gpu]
"""
import argparse
import os
import tempfile

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LaplacianNd, spsolve

from hpcsuite import pgas
from hpcsuite.runtime import Team, install_abort_hook
from hpcsuite.solvers import DistCSR, cg

install_abort_hook()
p = argparse.ArgumentParser()
p.add_argument("--out", default=None)
p.add_argument("--gpu", action="store_true")
opts = p.parse_args()
team = Team.world()
n, nu, dt, steps = 40, 1.0, 1e-3, 5
h = 1.0 / (n + 1)
N = n * n
A_full = -LaplacianNd((n, n), boundary_conditions="dirichlet").tosparse().astype(float) / h**2
M_full = (sp.identity(N) + dt * nu * A_full).tocsr()      # the backward-Euler matrix

# --- the solve
M = DistCSR.from_generator(N, lambda r0, r1: M_full[r0:r1], team=team,
                           backend="gpu" if opts.gpu else "cpu")   # each rank: its own rows only
i, j = np.divmod(np.arange(M.row_start, M.row_stop), n)           # grid point of each local row
u = M.backend.asarray(np.sin(np.pi * (i + 1) * h) * np.sin(np.pi * (j + 1) * h))
for step in range(steps):
    u, info = cg(M, u, x0=u, rtol=1e-12, M="jacobi")      # collective; u: this rank's rows
    assert info == 0, f"cg did not converge (info={info})"
# --- check

out = team.bcast(opts.out or (tempfile.mkdtemp() if team.rank == 0 else None))
path = os.path.join(out, "heat.h5")
v = pgas.zeros((N,), team=team)                           # BLOCKED: the same row blocks as M
assert v.local_indices[0][0] == M.row_start and v.local.shape[0] == M.local_rows
v.local[...] = M.backend.to_host(u) if opts.gpu else u
pgas.save_hdf5(v, path, "u", attrs={"n": n, "dt": dt, "steps": steps})
v.free()

lam = 8 * np.sin(np.pi * h / 2) ** 2 / h**2                # eigenvalue of A for that mode
if team.rank == 0:
    import h5py
    with h5py.File(path, "r") as f:
        got = f["u"][...]
    x = np.arange(1, n + 1) * h
    u0 = np.outer(np.sin(np.pi * x), np.sin(np.pi * x)).ravel()
    exact = u0 / (1 + dt * nu * lam) ** steps
    ref = u0.copy()
    for _ in range(steps):
        ref = spsolve(M_full.tocsc(), ref)
    e1, e2 = np.abs(got - exact).max(), np.abs(got - ref).max()
    print(f"implicit heat, {steps} CG steps on {team.size} ranks: error vs exact decay {e1:.1e}, "
          f"vs SciPy spsolve {e2:.1e}")
    print("VERIFIED" if max(e1, e2) < 1e-9 else "FAILED")

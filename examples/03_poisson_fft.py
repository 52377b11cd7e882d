"""Example 3: Poisson and Helmholtz solves with the FFT + tridiagonal solver.

Shows: ``hpcsuite.solvers.PoissonSolver`` on a box with a boundary condition per axis (here
periodic in x, Dirichlet in y, zero-gradient walls in z), on a ``pgas`` array distributed over a
px x py process grid (z-pencils, ``solver.zeros()``). The right-hand side is one eigenmode of the
discrete Laplacian, so the exact discrete solution is known in closed form; then a Helmholtz solve
``(L - lam) p = f`` of the same mode, and a pure-Poisson problem that is singular (periodic and
Neumann only): its right-hand side must have zero mean, and the solution returned has zero mean.

Launch:  mpiexec -n 2 python examples/03_poisson_fft.py
"""
import numpy as np
from mpi4py import MPI

from hpcsuite.runtime import InputError, Team, install_abort_hook
from hpcsuite.solvers import PoissonSolver

install_abort_hook()
team = Team.world()
nx, ny, nz = 32, 24, 16
dx, dy, dz = 2.0 / nx, 1.5 / ny, 1.0 / nz
mx, my, mz = 2, 1, 3                                  # the eigenmode

solver = PoissonSolver((nx, ny, nz), (dx, dy, dz), bc=("periodic", "dirichlet", "neumann"),
                       team=team)                     # collective
f = solver.zeros()                                    # a DistArray in the solver's z-pencil layout
i, j, k = f.local_global_indices()                    # global indices of this rank's block
exact = (np.cos(2 * np.pi * mx * i / nx) * np.sin(np.pi * my * (j + 0.5) / ny)  # cell centres
         * np.cos(np.pi * mz * (k + 0.5) / nz))       # sin: zero at the y faces; cos: zero gradient in z
lam = (-4 * np.sin(np.pi * mx / nx) ** 2 / dx**2 - 4 * np.sin(np.pi * my / (2 * ny)) ** 2 / dy**2
       - 4 * np.sin(np.pi * mz / (2 * nz)) ** 2 / dz**2)   # its discrete eigenvalue
f.local[...] = lam * exact
p = solver.solve(f)                                   # collective: a new DistArray like f
err = team.allreduce(float(np.abs(p.local - exact).max()), op=MPI.MAX)

shift = 5.0                                           # Helmholtz: (L - 5) p = f
helm = PoissonSolver((nx, ny, nz), (dx, dy, dz), bc=("periodic", "dirichlet", "neumann"), lam=shift,
                     team=team)
f.local[...] = (lam - shift) * exact
helm.solve(f, out=p)                                  # into an existing array
err = max(err, team.allreduce(float(np.abs(p.local - exact).max()), op=MPI.MAX))

neumann = PoissonSolver((nx, ny, nz), (dx, dy, dz), bc=("periodic", "neumann", "neumann"), team=team)
f.local[...] = 1.0                                    # nonzero mean: no solution exists
try:
    neumann.solve(f)
    refused = False
except InputError as exc:                             # the same one-line error on every rank
    refused = "nonzero mean" in str(exc)
if team.rank == 0:
    print(f"PoissonSolver on {team.size} ranks ({'x'.join(map(str, solver.dims))}, layout {solver.layout}): "
          f"max error vs exact discrete solutions {err:.1e}; nonzero-mean rhs refused: {refused}")
    print("VERIFIED" if err < 1e-10 and refused else "FAILED")
for x in (solver, helm, neumann, f, p):
    x.free()

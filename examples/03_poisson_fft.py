"""Example 3: a Poisson solve with the FFT + tridiagonal solver.

Shows: ``hpcsuite.solvers.poisson.PoissonFFT`` (the LES's pressure solver, usable on its own) on a
box periodic in x and y with zero-gradient walls in z. The right-hand side is one eigenmode of the
discrete Laplacian, so the exact discrete solution is known in closed form; the blocks come from a
``pgas`` array distributed over a px x py process grid (z-pencils). Note: ``PoissonFFT`` is not yet
exported from ``hpcsuite.solvers``; its import path may change.

Launch:  mpiexec -n 2 python examples/03_poisson_fft.py
"""
import numpy as np
from mpi4py import MPI

from hpcsuite import pgas
from hpcsuite.runtime import Team, install_abort_hook
from hpcsuite.solvers.poisson import PoissonFFT

install_abort_hook()
team = Team.world()
nx, ny, nz = 32, 24, 16
Lx, Ly, Lz = 2.0, 1.5, 1.0
dx, dy, dz = Lx / nx, Ly / ny, Lz / nz
mx, my, mz = 2, 1, 3                                  # the eigenmode

f = pgas.zeros((nx, ny, nz), dist=(pgas.BLOCKED, pgas.BLOCKED, pgas.NONE), grid=(0, 0, 1), team=team)
px, py, _ = f.pattern.grid                          # the process grid MPI chose
i, j, k = np.meshgrid(*f.local_indices, indexing="ij")
exact = (np.cos(2 * np.pi * mx * i / nx) * np.sin(2 * np.pi * my * j / ny)
         * np.cos(np.pi * mz * (k + 0.5) / nz))       # cell centres; cos in z: zero gradient at walls
lam = (-4 * np.sin(np.pi * mx / nx) ** 2 / dx**2 - 4 * np.sin(np.pi * my / ny) ** 2 / dy**2
       - 4 * np.sin(np.pi * mz / (2 * nz)) ** 2 / dz**2)   # its discrete eigenvalue

solver = PoissonFFT((nx, ny, nz), dx, dy, dzf=np.full(nz, dz), dzh=np.full(nz + 1, dz), team=team,
                    dims=(px, py))                    # collective
p = solver.solve(lam * exact)                         # collective: this rank's block of p
err = team.allreduce(float(np.abs(p - exact).max()), op=MPI.MAX)
if team.rank == 0:
    print(f"Poisson FFT on {team.size} ranks ({px}x{py}, layout {solver.layout}): "
          f"max error vs exact discrete solution {err:.1e}")
    print("VERIFIED" if err < 1e-10 else "FAILED")
solver.free()
f.free()

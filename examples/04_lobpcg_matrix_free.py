"""Example 4: LOBPCG on your own matrix-free operator.

Shows: ``hpcsuite.solvers.lobpcg`` on a ``RowOperator``: a 1-D Schroedinger-type operator
(A x)_i = 2 x_i - x_{i-1} - x_{i+1} + V_i x_i (Dirichlet ends) that is never assembled. Each rank
owns a BLOCKED block of rows and gets the one neighbouring row it needs from each side with
``Team.Sendrecv``; ``diagonal`` enables the Jacobi preconditioner. Verified against SciPy's
tridiagonal eigensolver on the same operator.

Launch:  mpiexec -n 2 python examples/04_lobpcg_matrix_free.py
"""
import numpy as np
from mpi4py import MPI
from scipy.linalg import eigh_tridiagonal

from hpcsuite.runtime import Team, install_abort_hook
from hpcsuite.solvers import RowOperator, lobpcg

install_abort_hook()
team = Team.world()
n, k = 200, 4
V = 1e-3 * (np.arange(n) - n / 2) ** 2                    # a harmonic potential, on every rank

op = None


def matmat(X):
    """This rank's rows of A @ X from its rows of X. Collective (neighbour exchange)."""
    r0, r1 = op.row_start, op.row_stop
    below = np.zeros((1, X.shape[1]))                     # row r0 - 1 (zero past the wall)
    above = np.zeros((1, X.shape[1]))                     # row r1
    lo = team.rank - 1 if team.rank > 0 else MPI.PROC_NULL
    hi = team.rank + 1 if team.rank < team.size - 1 else MPI.PROC_NULL
    team.Sendrecv(np.ascontiguousarray(X[-1:]), hi, below, lo)   # my last row up, theirs down
    team.Sendrecv(np.ascontiguousarray(X[:1]), lo, above, hi)
    Xg = np.vstack([below, X, above])
    return (2 + V[r0:r1, None]) * X - Xg[:-2] - Xg[2:]


op = RowOperator(n, matmat, team=team, diagonal=lambda: 2 + V[op.row_start:op.row_stop])
res = lobpcg(op, k, M="jacobi", tol=1e-9, maxiter=500)    # collective

ref = eigh_tridiagonal(2 + V, -np.ones(n - 1), select="i", select_range=(0, k - 1))[0]
err = np.abs(res.eigenvalues - ref).max()
if team.rank == 0:
    print(f"LOBPCG matrix-free on {team.size} ranks: converged={res.converged} in {res.iterations} "
          f"iterations; eigenvalues {np.round(res.eigenvalues, 6)}; max error vs SciPy {err:.1e}")
    print("VERIFIED" if res.converged and err < 1e-7 else "FAILED")

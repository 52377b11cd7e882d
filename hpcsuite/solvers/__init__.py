"""Portable solvers that run on NumPy, CuPy or a strict array-API checker from one source.

* :mod:`.stencil`: explicit 7- / 27-point stencil time stepping (heat equation, Jacobi) on
  distributed 3-D arrays with deep, communication-avoiding halos.
* :mod:`.sparse`: :class:`DistCSR`, sparse matrices distributed by row blocks (SpMM with a
  precomputed neighbour exchange, optional symmetric half storage).
* :mod:`.lobpcg`: :func:`lobpcg`, distributed LOBPCG for a few extreme eigenpairs.
* :mod:`.krylov`: :func:`cg`, :func:`minres`, :func:`gmres` (restarted) with Jacobi, Chebyshev
  polynomial and user preconditioners.
* :mod:`.poisson`: :class:`PoissonSolver`, Poisson/Helmholtz on boxes (periodic, Neumann, Dirichlet
  per axis) by fast transforms in x and y and a tridiagonal solve in z (the LES's pressure solver).
"""
from .stencil import DEPTH_CANDIDATES, KINDS, StencilSolver, StencilStats, heat_coeffs

__all__ = ["StencilSolver", "StencilStats", "heat_coeffs", "KINDS", "DEPTH_CANDIDATES"]

from .sparse import DistCSR  # noqa: E402
from .lobpcg import LobpcgResult, RowOperator, lobpcg  # noqa: E402

__all__ += ["DistCSR", "lobpcg", "LobpcgResult", "RowOperator"]
from .krylov import Chebyshev, Jacobi, KrylovResult, cg, estimate_bounds, gmres, minres  # noqa: E402

__all__ += ["cg", "minres", "gmres", "KrylovResult", "Jacobi", "Chebyshev", "estimate_bounds"]
from .poisson import PoissonSolver  # noqa: E402

__all__ += ["PoissonSolver"]

"""Portable solvers that run on NumPy, CuPy or a strict array-API checker from one source.

* :mod:`.stencil`: explicit 7- / 27-point stencil time stepping (heat equation, Jacobi) on
  distributed 3-D arrays with deep, communication-avoiding halos.
* :mod:`.sparse`: :class:`DistCSR`, sparse matrices distributed by row blocks (SpMM with a
  precomputed neighbour exchange, optional symmetric half storage).
* :mod:`.lobpcg`: :func:`lobpcg`, distributed LOBPCG for a few extreme eigenpairs.
"""
from .stencil import DEPTH_CANDIDATES, KINDS, StencilSolver, StencilStats, heat_coeffs

__all__ = ["StencilSolver", "StencilStats", "heat_coeffs", "KINDS", "DEPTH_CANDIDATES"]

from .sparse import DistCSR  # noqa: E402
from .lobpcg import LobpcgResult, RowOperator, lobpcg  # noqa: E402

__all__ += ["DistCSR", "lobpcg", "LobpcgResult", "RowOperator"]

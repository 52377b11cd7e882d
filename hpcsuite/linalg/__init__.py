"""Distributed dense factorizations on PGAS arrays, the targets of ``hpcsuite.tune``.

* :func:`cholesky`: 2-D block-cyclic right-looking Cholesky (ScaLAPACK ``PDPOTRF`` structure); tuning
  parameters: block size and process grid (the array's), panel broadcast ``variant``, ``lookahead``.
* :func:`cholqr2`: CholeskyQR2 of a tall-skinny matrix; tuning parameters: process grid and panel
  width.
* :mod:`~hpcsuite.linalg.kernels`: the local BLAS/LAPACK kernels (``potrf``, ``trsm``, ``trmm``,
  ``syrk``, ``gemm``), each run through :func:`hpcsuite.runtime.compute` with an integer key and a
  flop count so the tuner can time, count and skip them.

Layer: ``runtime`` <- ``pgas`` <- ``linalg``.
"""
from .cholesky import VARIANTS, cholesky
from .cholqr import cholqr2
from .kernels import NotPositiveDefiniteError

__all__ = ["cholesky", "cholqr2", "NotPositiveDefiniteError", "VARIANTS"]

"""Block helpers the operator modules share (views of a rank's block with halo) and the backends'
array checks. All functions here are local."""
from __future__ import annotations

import numpy as np

from ...runtime.device import strict_device_of
from .. import fused
from ..gpubase import usable as cuda_arrays
from ..state import add_at

__all__ = ["core", "full", "zeros", "strict_device", "interior_add", "numpy_arrays", "numba_arrays", "cuda_arrays",
           "random", "copy"]


def core(a, di: int = 0, dj: int = 0):
    """The block without its outermost x-y rim, shifted by ``(di, dj)``."""
    nx, ny = a.shape[0], a.shape[1]
    return a[1 + di:nx - 1 + di, 1 + dj:ny - 1 + dj, ...]


def strict_device(xp, like) -> dict:
    """``device=`` for array_api_strict's non-default device (NumPy and CuPy need none)."""
    device = strict_device_of(xp, (like,))
    return {} if device is None else {"device": device}


def full(xp, c, shape2):
    """A block-shaped array holding ``c`` inside a zero rim of one cell."""
    out = xp.zeros(tuple(shape2) + tuple(c.shape[2:]), dtype=c.dtype, **strict_device(xp, c))
    out[1:-1, 1:-1, ...] = c
    return out


def zeros(xp, shape, like):
    """Zeros of ``like``'s dtype on ``like``'s device."""
    return xp.zeros(shape, dtype=like.dtype, **strict_device(xp, like))


def interior_add(t, c, h: int, nxl: int, nyl: int, levels=None) -> None:
    """Add a core-shaped array ``c`` (the block less its one-cell rim) to the interior of ``t``."""
    src = c[h - 1:h - 1 + nxl, h - 1:h - 1 + nyl, ...]
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    add_at(t, (I, J, ...) if levels is None else (I, J, levels), src)


def numpy_arrays(*arrays) -> bool:
    """Whether every argument is a NumPy array (the numba kernels' condition)."""
    return all(isinstance(a, np.ndarray) for a in arrays)


def numba_arrays(*arrays) -> bool:
    """Whether the numba kernels (``les.fused``) can run on these arguments: numba installed and every
    one a NumPy array."""
    return fused.AVAILABLE and all(isinstance(a, np.ndarray) for a in arrays)


def random(case, rng, shape, lo: float = -1.0, hi: float = 1.0):
    """Uniform random numbers in ``[lo, hi)`` as an array of ``case.xp`` (for operator examples)."""
    return case.xp.asarray(rng.uniform(lo, hi, tuple(shape)))


def copy(case, a):
    """A fresh copy of ``a`` (for operator examples: implementations may write into their inputs)."""
    return case.xp.asarray(a, copy=True) if not isinstance(a, float) else a

"""``cupy.linalg`` of the stand-in: NumPy's, on device arrays."""
import numpy as _np

from ._core import namespace_getattr as _get

__all__ = [n for n in dir(_np.linalg) if not n.startswith("_") and callable(getattr(_np.linalg, n))]


def __getattr__(name):
    return _get(_np.linalg, name)

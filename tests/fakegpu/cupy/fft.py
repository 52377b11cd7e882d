"""``cupy.fft`` of the stand-in: NumPy's, on device arrays."""
import numpy as _np

from ._core import namespace_getattr as _get

__all__ = [n for n in dir(_np.fft) if not n.startswith("_") and callable(getattr(_np.fft, n))]


def __getattr__(name):
    return _get(_np.fft, name)

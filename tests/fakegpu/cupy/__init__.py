"""A CuPy stand-in on NumPy for CPU-only test runs (see ../README.md). Not a GPU."""
import numpy as _np

from . import cuda, fft, lib, linalg, random  # noqa: F401
from ._core import namespace_getattr, ndarray  # noqa: F401
from ._kernels import RawModule  # noqa: F401

__version__ = "0.0-fake"
__all__ = [n for n in _np.__all__ if not n.startswith("_") and n not in
           ("fft", "linalg", "random", "ndarray", "testing", "lib", "ma", "polynomial", "char", "rec",
            "ctypeslib", "dtypes", "exceptions", "emath", "strings", "typing", "f2py")]


def __getattr__(name):
    return namespace_getattr(_np, name)


def is_available() -> bool:
    return True


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    """Device -> host copy (host arrays pass through, as in CuPy)."""
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return _np.asarray(a, order=order)


def get_array_module(*args):
    import sys
    return sys.modules[__name__] if any(isinstance(a, ndarray) for a in args) else _np


# the builtins-shadowing names that `from cupy import *` does not bring (array_api_compat imports them)
abs = namespace_getattr(_np, "abs")
max = namespace_getattr(_np, "max")
min = namespace_getattr(_np, "min")
round = namespace_getattr(_np, "round")
bool_ = _np.bool_

"""The array API namespace of :class:`~hpcsuite.pgas.DistArray` (``a.__array_namespace__()``).

It holds what has distributed semantics (the table in docs/pgas.md, "NumPy on DistArrays"):
elementwise functions (NumPy's ufuncs, so operands line up as in :mod:`hpcsuite.pgas.arith`),
reductions, ``matmul`` / ``matrix_transpose`` / ``permute_dims``, ``reshape`` where no element
moves, ``concat`` along an undistributed axis, ``where``, ``clip``, ``astype``,
``cumulative_sum``, creation functions, dtypes and their queries. Asking it for anything else
raises ``AttributeError`` naming the function, so array-API code that only uses the supported part
runs unchanged on DistArrays, and code that needs more fails at once, before any communication.

Creation functions make BLOCKED arrays (dimension 0) over the world team on the CPU unless
``device=`` (a :class:`~hpcsuite.runtime.Device` or ``"cpu"`` / ``"gpu"``) says otherwise;
``asarray`` of a NumPy array (the same on every rank) distributes it that way without
communication, and of a scalar returns a 0-d NumPy array (DistArrays are at least 1-D; a 0-d array
broadcasts against them as a scalar). Every function is collective except the dtype queries.
"""
from __future__ import annotations

import numpy as np

from . import arith, manipulation, reductions
from .array import DistArray, from_numpy, full
from .sort import scan

__all__ = ["namespace", "DistNamespace", "ELEMENTWISE"]

#: array API name -> NumPy ufunc
ELEMENTWISE = {
    "abs": np.absolute, "acos": np.arccos, "acosh": np.arccosh, "add": np.add, "asin": np.arcsin,
    "asinh": np.arcsinh, "atan": np.arctan, "atan2": np.arctan2, "atanh": np.arctanh,
    "bitwise_and": np.bitwise_and, "bitwise_left_shift": np.left_shift, "bitwise_invert": np.invert,
    "bitwise_or": np.bitwise_or, "bitwise_right_shift": np.right_shift, "bitwise_xor": np.bitwise_xor,
    "ceil": np.ceil, "conj": np.conjugate, "copysign": np.copysign, "cos": np.cos, "cosh": np.cosh,
    "divide": np.divide, "equal": np.equal, "exp": np.exp, "expm1": np.expm1, "floor": np.floor,
    "floor_divide": np.floor_divide, "greater": np.greater, "greater_equal": np.greater_equal,
    "hypot": np.hypot, "isfinite": np.isfinite, "isinf": np.isinf, "isnan": np.isnan,
    "less": np.less, "less_equal": np.less_equal, "log": np.log, "log1p": np.log1p, "log2": np.log2,
    "log10": np.log10, "logaddexp": np.logaddexp, "logical_and": np.logical_and,
    "logical_not": np.logical_not, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply, "negative": np.negative,
    "nextafter": np.nextafter, "not_equal": np.not_equal, "positive": np.positive, "pow": np.power,
    "reciprocal": np.reciprocal, "remainder": np.remainder, "sign": np.sign, "signbit": np.signbit,
    "sin": np.sin, "sinh": np.sinh, "square": np.square, "sqrt": np.sqrt, "subtract": np.subtract,
    "tan": np.tan, "tanh": np.tanh, "trunc": np.trunc,
}

_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float32", "float64", "complex64", "complex128")


def _device_kw(device):
    return {} if device is None else {"device": device.name if hasattr(device, "name") else device}


class DistNamespace:
    """The namespace object (one per process). Attribute access for a name without a distributed
    implementation raises ``AttributeError`` naming it."""

    __array_api_version__ = "2023.12"

    def __init__(self):
        for name, uf in ELEMENTWISE.items():
            setattr(self, name, uf)
        for name in _DTYPES:
            setattr(self, name, getattr(np, name + ("_" if name == "bool" else "")))
        self.e, self.pi, self.inf, self.nan, self.newaxis = np.e, np.pi, np.inf, np.nan, None
        self.finfo, self.iinfo, self.can_cast = np.finfo, np.iinfo, np.can_cast
        self.result_type = lambda *a: np.result_type(*[x.dtype if isinstance(x, DistArray) else x
                                                       for x in a])
        self.sum, self.prod, self.mean = reductions.sum, reductions.prod, reductions.mean
        self.min, self.max, self.any, self.all = (reductions.min, reductions.max, reductions.any,
                                                  reductions.all)
        self.var, self.std = reductions.var, reductions.std
        self.matmul, self.where, self.copy = manipulation.matmul, arith.where, arith.copy

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"the DistArray array-API namespace has no {name!r}: it has no distributed "
                             f"implementation here (see 'NumPy on DistArrays' in docs/pgas.md)")

    def __repr__(self) -> str:
        return "<array API namespace of hpcsuite.pgas.DistArray>"

    # ------------------------------------------------------------------ dtypes (local)
    @staticmethod
    def isdtype(dtype, kind):
        """``numpy.isdtype``. Local."""
        return np.isdtype(np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype, kind)

    # ------------------------------------------------------------------ reductions (collective)
    @staticmethod
    def argmin(x, /, *, axis=None, keepdims=False):
        return reductions.argmin(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def argmax(x, /, *, axis=None, keepdims=False):
        return reductions.argmax(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
        """The distributed scan (CPU and GPU arrays; on the device for GPU ones); ``include_initial`` is
        not supported."""
        arith.check_dist(x, "cumulative_sum", "x")
        if include_initial or dtype is not None:
            raise TypeError("cumulative_sum on DistArrays: include_initial= and dtype= are not supported")
        r = scan(x, "sum", axis=axis)
        r.auto_free = True
        return r

    # ------------------------------------------------------------------ manipulation (collective)
    @staticmethod
    def matrix_transpose(x, /):
        arith.check_dist(x, "matrix_transpose", "x")
        if x.ndim < 2:
            raise ValueError("matrix_transpose: x must be at least 2-D")
        return manipulation.transpose(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))

    @staticmethod
    def permute_dims(x, /, axes):
        return manipulation.transpose(x, axes)

    @staticmethod
    def reshape(x, /, shape, *, copy=None):
        return manipulation.reshape(x, shape, copy=copy)

    @staticmethod
    def concat(arrays, /, *, axis=0):
        return manipulation.concatenate(arrays, axis=axis)

    @staticmethod
    def astype(x, dtype, /, *, copy=True, device=None):
        if device is not None:
            raise TypeError("astype on DistArrays: device= is not supported (use pgas.copy)")
        return arith.astype(x, dtype, copy=copy)

    @staticmethod
    def clip(x, /, min=None, max=None):   # noqa: A002 - the standard's names
        if min is None and max is None:
            return arith.copy(x)
        return arith.clip(x, min, max)

    @staticmethod
    def round(x, /):
        """Round half to even (``numpy.rint``); integers are returned as a copy."""
        arith.check_dist(x, "round", "x")
        return arith.copy(x) if x.dtype.kind in "biu" else np.rint(x)

    # ------------------------------------------------------------------ creation (collective)
    @staticmethod
    def asarray(obj, /, *, dtype=None, device=None, copy=None):
        """A DistArray as it is (or converted), a NumPy array (the same on every rank) distributed
        BLOCKED without communication, a scalar as a 0-d NumPy array."""
        if isinstance(obj, DistArray):
            if dtype is None or np.dtype(dtype) == obj.dtype:
                return arith.copy(obj) if copy else obj
            if copy is False:
                raise ValueError("asarray: copy=False with another dtype")
            return arith.astype(obj, dtype)
        arr = np.asarray(obj, dtype=dtype)
        if arr.ndim == 0:
            return arr
        r = from_numpy(arr, root=None, **_device_kw(device))
        r.auto_free = True
        return r

    @staticmethod
    def full(shape, fill_value, *, dtype=None, device=None):
        r = full(shape, fill_value, dtype=dtype, **_device_kw(device))
        r.auto_free = True
        return r

    def zeros(self, shape, *, dtype=None, device=None):
        return self.full(shape, 0, dtype=np.float64 if dtype is None else dtype, device=device)

    def ones(self, shape, *, dtype=None, device=None):
        return self.full(shape, 1, dtype=np.float64 if dtype is None else dtype, device=device)

    def empty(self, shape, *, dtype=None, device=None):
        return self.zeros(shape, dtype=dtype, device=device)

    @staticmethod
    def zeros_like(x, /, *, dtype=None, device=None):
        return np.zeros_like(x, dtype=dtype)

    @staticmethod
    def ones_like(x, /, *, dtype=None, device=None):
        return np.ones_like(x, dtype=dtype)

    @staticmethod
    def empty_like(x, /, *, dtype=None, device=None):
        return np.empty_like(x, dtype=dtype)

    @staticmethod
    def full_like(x, /, fill_value, *, dtype=None, device=None):
        return np.full_like(x, fill_value, dtype=dtype)


_NAMESPACE = DistNamespace()


def namespace(api_version=None) -> DistNamespace:
    """The namespace (``DistArray.__array_namespace__``). Local."""
    if api_version is not None and api_version not in ("2022.12", "2023.12"):
        raise ValueError(f"unsupported array API version {api_version!r} (2022.12, 2023.12)")
    return _NAMESPACE

"""The stand-in's array type and the wrapping of NumPy functions (see ../README.md)."""
from __future__ import annotations

import collections
import functools
import numbers
import os
import sys

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

_CREATION = {"asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray"}

#: every host <-> device copy: (direction, bytes), for tests of data residency
transfers: list = []

#: what would be a kernel launch on a GPU, by kind ("ufunc:add", "sum", "setitem", "raw:name", ...):
#: a proxy for the launch overhead that dominates small grids (a count, not a time)
launches = collections.Counter()

# functions that make views or allocate without writing (no kernel on a GPU)
_NO_LAUNCH = {"reshape", "transpose", "broadcast_to", "moveaxis", "swapaxes", "expand_dims", "squeeze",
              "empty", "empty_like", "result_type", "shape", "ndim", "size", "atleast_1d", "atleast_2d",
              "atleast_3d", "may_share_memory", "shares_memory", "view", "isscalar", "iscomplexobj",
              "isrealobj", "can_cast", "promote_types", "astype_noop", "__len__", "dtype"}


#: set to a Counter to also count launches by the innermost ``hpcsuite`` source line making them
launch_sites: collections.Counter | None = None


def _launched(kind: str) -> None:
    launches[kind] += 1
    if launch_sites is not None:
        f = sys._getframe(1)
        while f is not None and "hpcsuite" not in f.f_code.co_filename:
            f = f.f_back
        if f is not None:
            path = f.f_code.co_filename
            launch_sites[f"{path[path.rindex('hpcsuite'):]}:{f.f_lineno}"] += 1


def _moved(direction: str, a) -> None:
    transfers.append((direction, int(getattr(a, "nbytes", 8))))


class _Memory:
    def __init__(self, a):
        self.ptr = a.ctypes.data


class ndarray(NDArrayOperatorsMixin):
    """Device memory, held by a NumPy array that leaves only through ``get()``/``asnumpy``."""

    __slots__ = ("_a",)
    __array_priority__ = 100

    def __init__(self, a):
        self._a = a

    # no implicit device -> host conversion (CuPy raises the same way)
    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(_strict(x) for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_strict(o) for o in kwargs["out"])
        _launched(f"ufunc:{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"))
        return wrap(getattr(ufunc, method)(*inputs, **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        # np.f(device array) runs the device version, as with CuPy's __array_function__
        return _forward(func, func.__name__)(*args, **kwargs)

    # ---------------------------------------------------------------- Python protocol
    def __getitem__(self, key):
        out = self._a[_index(key)]
        if isinstance(out, np.ndarray) and not np.may_share_memory(out, self._a):
            _launched("take")                      # advanced indexing copies (a kernel)
        return wrap(out)

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray) and value.ndim:  # CuPy 14: copy in with cupy.asarray first
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        _launched("setitem")
        self._a[_index(key)] = unwrap(value)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (wrap(x) for x in self._a)

    def __float__(self):
        _moved("to_host", self._a)
        return float(self._a)

    def __int__(self):
        _moved("to_host", self._a)
        return int(self._a)

    def __index__(self):
        return self._a.__index__()

    def __bool__(self):
        _moved("to_host", self._a)
        return bool(self._a)

    def __complex__(self):
        _moved("to_host", self._a)
        return complex(self._a)

    def __repr__(self):
        return "fakecupy." + repr(self._a)

    def __copy__(self):
        _launched("copy")
        return ndarray(self._a.copy())

    def __deepcopy__(self, memo):
        return ndarray(self._a.copy())

    # ---------------------------------------------------------------- attributes
    def get(self, stream=None, order="C", out=None):
        _moved("to_host", self._a)
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, order=order, copy=True)

    @property
    def data(self):
        return _Memory(self._a)

    @property
    def __cuda_array_interface__(self):
        # only for a "CUDA-aware MPI" (HPCSUITE_GPU_AWARE_MPI=1): the memory is host memory, so
        # any MPI reads it; otherwise mpi4py finds no buffer and refuses, as a plain MPI must
        if os.environ.get("HPCSUITE_GPU_AWARE_MPI") != "1":
            raise AttributeError("__cuda_array_interface__")
        if not self._a.flags.c_contiguous:
            raise BufferError("not contiguous")
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "version": 3, "strides": None,
                "data": (self._a.ctypes.data if self._a.size else 0, False)}

    @property
    def device(self):
        from . import cuda
        return cuda.Device(0)

    @property
    def T(self):
        return ndarray(self._a.T)

    @property
    def mT(self):
        return ndarray(self._a.mT)

    @property
    def real(self):
        return ndarray(self._a.real)

    @property
    def imag(self):
        return ndarray(self._a.imag)

    @property
    def base(self):
        return None if self._a.base is None else ndarray(self._a.base)

    def __getattr__(self, name):
        if name.startswith("__"):         # no __array_interface__ & co.: no way around __array__
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if name in ("item", "tolist", "tobytes"):        # device -> host, as in CuPy
            _moved("to_host", self._a)
            return attr
        if callable(attr):
            return _method(attr, name)
        return attr                       # shape, dtype, ndim, size, nbytes, strides, flags, ...


ndarray.__module__ = "cupy"


def _method(fn, name: str | None = None):
    name = name or fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if name not in _NO_LAUNCH:
            _launched(name)
        args = tuple(_strict(a) for a in args)
        kwargs = {k: _strict(v) for k, v in kwargs.items()}
        return wrap(fn(*args, **kwargs))
    return call


def _index(key):
    if isinstance(key, tuple):
        return tuple(unwrap(k) for k in key)
    return unwrap(key)


def unwrap(x):
    """Device array -> its NumPy storage (anything else as it is)."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, (list, tuple)):
        return type(x)(unwrap(v) for v in x)
    return x


def _strict(x):
    """Like :func:`unwrap`, but a host array (not a scalar) is an error, as in CuPy's operations."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray) and x.ndim > 0:
        raise TypeError(f"Unsupported type {type(x)}: a NumPy array in a CuPy operation "
                        "(copy it to the device with cupy.asarray first)")
    if isinstance(x, (list, tuple)):
        return type(x)(_strict(v) for v in x)
    return x


def wrap(x):
    """NumPy results -> device arrays (0-d ones too, as CuPy's reductions give)."""
    if isinstance(x, np.ndarray):
        return ndarray(x)
    if isinstance(x, np.generic) and not isinstance(x, (np.str_, np.bytes_)):
        return ndarray(np.asarray(x))
    if hasattr(x, "_fields") and isinstance(x, tuple):       # namedtuples (eigh, qr results)
        return type(x)(*(wrap(v) for v in x))
    if isinstance(x, tuple):
        return tuple(wrap(v) for v in x)
    if isinstance(x, list):
        return [wrap(v) for v in x]
    return x


def _forward(fn, name: str):
    """A device version of the NumPy function ``fn``."""
    if name in _CREATION:
        @functools.wraps(fn)
        def create(obj, *args, **kwargs):
            kwargs.pop("blocking", None)
            if isinstance(obj, ndarray):
                obj = obj._a.copy() if name == "array" else obj._a
            else:                                  # a host -> device copy: never an alias
                obj = np.array(unwrap(obj), copy=True)
                _moved("to_device", obj)
            out = np.asarray(fn(obj, *args, **kwargs))
            if name == "array" or not np.shares_memory(out, obj):   # a copy (a kernel or a memcpy)
                _launched(name)
            return ndarray(out)
        return create

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if name not in _NO_LAUNCH:
            _launched(name)
        args = tuple(_strict(a) for a in args)
        kwargs = {k: _strict(v) for k, v in kwargs.items()}
        return wrap(fn(*args, **kwargs))
    return call


def namespace_getattr(np_module, name: str):
    """Module ``__getattr__``: the NumPy attribute ``name``, functions wrapped for the device."""
    try:
        attr = getattr(np_module, name)
    except AttributeError:
        raise AttributeError(f"fake cupy has no attribute {name!r} (NumPy has none either)") from None
    if isinstance(attr, type) or not callable(attr) or isinstance(attr, numbers.Number):
        return attr                      # dtypes, classes, constants
    if isinstance(attr, np.ufunc):
        return _Ufunc(attr)
    return _forward(attr, name)


class _Ufunc:
    """A ufunc that takes device arrays (and scalars) only."""

    def __init__(self, uf):
        self._uf = uf
        self.__name__ = uf.__name__

    def __call__(self, *args, **kwargs):
        _launched(f"ufunc:{self.__name__}")
        args = tuple(_strict(a) for a in args)
        if "out" in kwargs:
            out = kwargs["out"]
            kwargs["out"] = tuple(_strict(o) for o in out) if isinstance(out, tuple) else _strict(out)
        return wrap(self._uf(*args, **kwargs))

    def __getattr__(self, name):
        attr = getattr(self._uf, name)
        return _method(attr, f"ufunc:{self.__name__}.{name}") if callable(attr) else attr

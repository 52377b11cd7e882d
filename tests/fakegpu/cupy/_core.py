"""The stand-in's array type and the wrapping of NumPy functions (see ../README.md)."""
from __future__ import annotations

import collections
import functools
import numbers
import operator
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
# what a capture need not replay (allocations without a kernel, questions about arrays); what makes
# views is replayed (a view costs nothing; a reshape that copies must be replayed)
_NOT_RECORDED = {"empty", "empty_like", "result_type", "shape", "ndim", "size", "may_share_memory",
                 "shares_memory", "isscalar", "iscomplexobj", "isrealobj", "can_cast", "promote_types",
                 "__len__", "dtype"}


#: set to a Counter to also count launches by the innermost ``hpcsuite`` source line making them
launch_sites: collections.Counter | None = None


def _launched(kind: str) -> None:
    if capture is not None:             # captured: a node of the graph, launched with it
        capture.nodes[kind] += 1
        return
    launches[kind] += 1
    if launch_sites is not None:
        f = sys._getframe(1)
        while f is not None and "hpcsuite" not in f.f_code.co_filename:
            f = f.f_back
        if f is not None:
            path = f.f_code.co_filename
            launch_sites[f"{path[path.rindex('hpcsuite'):]}:{f.f_lineno}"] += 1


def _moved(direction: str, a) -> None:
    if capture is not None:
        capture.error = f"a {direction.replace('_', ' ')} copy"
        raise CaptureError(capture.error + " during stream capture")
    transfers.append((direction, int(getattr(a, "nbytes", 8))))


# ------------------------------------------------------------------ stream capture (CUDA graphs)
class CaptureError(RuntimeError):
    """What CUDA answers (cudaErrorStreamCaptureUnsupported / ...Invalidated) to an operation that a
    stream capture cannot record: a copy between host and device, a synchronisation, work on
    another stream. The capture is then invalid (``end_capture`` raises too)."""

    def __init__(self, what: str, code: str = "cudaErrorStreamCaptureUnsupported"):
        super().__init__(f"{code}: {what} (operation not permitted when stream is capturing)")


#: the capture under way (a :class:`Capture`), or None; set by ``cuda.Stream.begin_capture``
capture = None
#: the streams made current by ``with stream:`` (innermost last)
stream_stack: list = []


def _root(a):
    """The array that owns the memory of ``a`` (through views and ``as_strided``'s wrappers)."""
    r, b = a, getattr(a, "base", None)
    while b is not None:
        if isinstance(b, np.ndarray):
            r = b
        b = getattr(b, "base", None)
    return r


def _arrays(x, out: list) -> list:
    if isinstance(x, np.ndarray):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _arrays(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _arrays(v, out)
    return out


def _scalars_as_arrays(out):
    """NumPy scalars in a result as 0-d arrays (the buffers a capture's replays write into)."""
    if isinstance(out, np.generic):
        return np.asarray(out)
    if isinstance(out, tuple) and not hasattr(out, "_fields") and any(isinstance(v, np.generic) for v in out):
        return tuple(np.asarray(v) if isinstance(v, np.generic) else v for v in out)
    return out


def _same_view(a, b) -> bool:
    return (a is b or (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                       and a.shape == b.shape and a.strides == b.strides))


class Capture:
    """A stream capture being recorded (see ``cuda.Stream.begin_capture``).

    As CUDA does, the work issued during a capture is recorded, not done: each operation is
    recorded as a closure over the concrete buffers it reads and writes (device pointers) and the
    scalars it was given (frozen: kernel arguments by value), to be replayed in order by
    ``Graph.launch``. To know the shapes of what it makes, the stand-in executes each operation as
    well, after saving every buffer that existed before the capture the first time one is touched;
    ``end()`` puts those buffers back as they were and fills the buffers allocated during the
    capture with NaN (their contents are undefined until the graph runs, as on a GPU). Host <->
    device copies and synchronisations raise :class:`CaptureError`; work issued while another
    stream is current raises too (it would run outside the graph). Allocations are allowed (CuPy
    captures in relaxed mode) and listed in :attr:`allocations`: the graph keeps them alive.
    """

    def __init__(self, stream):
        self.stream = stream
        self.replay: list = []                  # closures, in order
        self.saved: list = []                   # (root, copy) of pre-existing buffers, in order
        self._seen: dict = {}                   # id(root) -> root: saved or allocated here
        self.fresh: dict = {}                   # id(root) -> root allocated during the capture
        self.nodes = collections.Counter()      # what would be a node of the graph, by kind
        self.allocations: list = []             # bytes of each allocation during the capture
        self.error: str | None = None

    def _touch(self, arrays) -> None:
        for a in arrays:
            r = _root(a)
            if id(r) not in self._seen:
                self._seen[id(r)] = r
                self.saved.append((r, np.array(r, copy=True)))

    def run(self, fn, args, kwargs, also=(), record: bool = True):
        """Execute ``fn(*args, **kwargs)`` and record it; returns its result."""
        if (stream_stack[-1] if stream_stack else None) is not self.stream:
            self.error = "work issued on a stream other than the capturing one"
            raise CaptureError(self.error + " during stream capture")
        self._touch(_arrays((args, kwargs, also), []))
        out = _scalars_as_arrays(fn(*args, **kwargs))
        outs = _arrays(out, [])
        for o in outs:
            r = _root(o)
            if id(r) not in self._seen:
                self._seen[id(r)] = self.fresh[id(r)] = r
                self.allocations.append(int(r.nbytes))
        if record:
            def replay(fn=fn, args=args, kwargs=kwargs, outs=outs):
                new = _arrays(_scalars_as_arrays(fn(*args, **kwargs)), [])
                for r, n in zip(outs, new):
                    if not _same_view(r, n):
                        np.copyto(r, n)
            self.replay.append(replay)
        return out

    def end(self) -> list:
        """Undo what executing the capture did; the closures to replay."""
        for r, copy in reversed(self.saved):
            r[...] = copy
        for r in self.fresh.values():
            if r.dtype.kind in "fc":
                r[...] = np.nan
        return self.replay


# what CuPy refuses during a capture: library calls it does not capture, and results whose size
# depends on the data (CuPy synchronises to learn it)
_LIBRARY = {"matmul": "cuBLAS", "dot": "cuBLAS", "vdot": "cuBLAS", "inner": "cuBLAS",
            "tensordot": "cuBLAS", "einsum": "cuBLAS"}
_DATA_SIZED = {"nonzero", "argwhere", "flatnonzero", "unique", "extract", "compress"}


def _refuse_in_capture(name: str, fn=None, args=()) -> None:
    if capture is None:
        return
    module = getattr(fn, "__module__", None) or ""
    library = _LIBRARY.get(name) or ("cuSOLVER" if module.startswith("numpy.linalg") else
                                     "cuRAND" if module.startswith("numpy.random") else None)
    if library is not None:
        raise NotImplementedError(f"calling {library} API during stream capture is currently unsupported "
                                  f"({name})")
    if name in _DATA_SIZED or (name == "where" and len(args) == 1):
        raise RuntimeError(f"{name}: the output size depends on the data; the current stream is capturing "
                           "(a synchronisation would be needed)")


def _execute(fn, args, kwargs, also=(), record: bool = True):
    """``fn(*args, **kwargs)``, or, during a capture, recorded (see :class:`Capture`)."""
    if capture is None:
        return fn(*args, **kwargs)
    return capture.run(fn, args, kwargs, also, record)


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
        _refuse_in_capture(ufunc.__name__)
        return wrap(_execute(getattr(ufunc, method), inputs, kwargs))

    def __array_function__(self, func, types, args, kwargs):
        # np.f(device array) runs the device version, as with CuPy's __array_function__
        return _forward(func, func.__name__)(*args, **kwargs)

    # ---------------------------------------------------------------- Python protocol
    def __getitem__(self, key):
        key = _index(key)
        if capture is not None and any(isinstance(k, np.ndarray) and k.dtype == bool
                                       for k in (key if isinstance(key, tuple) else (key,))):
            _refuse_in_capture("nonzero")           # a boolean mask: the size depends on the data
        out = self._a[key]
        if isinstance(out, np.ndarray) and not np.may_share_memory(out, self._a):
            _launched("take")                      # advanced indexing copies (a kernel)
            if capture is not None:
                out = capture.run(operator.getitem, (self._a, key), {})
        elif capture is not None and not isinstance(out, np.ndarray):     # an element: a 0-d copy
            out = capture.run(operator.getitem, (self._a, key), {})
        return wrap(out)

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray) and value.ndim:  # CuPy 14: copy in with cupy.asarray first
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        _launched("setitem")
        _execute(operator.setitem, (self._a, _index(key), unwrap(value)), {})

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
        return ndarray(_execute(np.copy, (self._a,), {}))

    def __deepcopy__(self, memo):
        return ndarray(_execute(np.copy, (self._a,), {}))

    # ---------------------------------------------------------------- attributes
    def set(self, arr, stream=None):
        """Host -> device copy into this array (as ``cupy.ndarray.set``)."""
        arr = np.asarray(arr)
        if arr.shape != self._a.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self._a.shape}, new shape: {arr.shape}")
        _moved("to_device", arr)
        _launched("set")
        self._a[...] = arr

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
        _refuse_in_capture(name, fn, args)
        args = tuple(_strict(a) for a in args)
        kwargs = {k: _strict(v) for k, v in kwargs.items()}
        return wrap(_execute(fn, args, kwargs, also=(getattr(fn, "__self__", None),),
                             record=name not in _NOT_RECORDED))
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
                if name == "array":
                    out = np.asarray(_execute(lambda o, *a, **k: fn(o.copy(), *a, **k), (obj._a, *args), kwargs))
                else:
                    out = np.asarray(_execute(fn, (obj._a, *args), kwargs))
                obj = obj._a
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
        _refuse_in_capture(name, fn, args)
        args = tuple(_strict(a) for a in args)
        kwargs = {k: _strict(v) for k, v in kwargs.items()}
        return wrap(_execute(fn, args, kwargs, record=name not in _NOT_RECORDED))
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
        _refuse_in_capture(self.__name__)
        args = tuple(_strict(a) for a in args)
        if "out" in kwargs:
            out = kwargs["out"]
            kwargs["out"] = tuple(_strict(o) for o in out) if isinstance(out, tuple) else _strict(out)
        return wrap(_execute(self._uf, args, kwargs))

    def __getattr__(self, name):
        attr = getattr(self._uf, name)
        return _method(attr, f"ufunc:{self.__name__}.{name}") if callable(attr) else attr

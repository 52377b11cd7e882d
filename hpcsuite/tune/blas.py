"""NumPy and SciPy BLAS/LAPACK calls as computation kernels: ``with tune.blas(): ...``.

Inside the context the functions of ``FUNCTIONS`` (``numpy.dot``, ``numpy.matmul``, the
factorizations and solves of ``numpy.linalg`` and ``scipy.linalg``) are replaced, at their module
attribute, by wrappers that run them through :func:`hpcsuite.runtime.compute`. Inside an
:class:`~hpcsuite.tune.Execution` a call is then a computation kernel named after the function
(``"numpy.dot"``, ``"scipy.linalg.cholesky"``) whose signature is made of its operands: for each
NumPy array its dtype, memory layout (C, F or strided) and shape, and the values of scalar
arguments (``lower``, ``mode``, ...). It is timed, feeds the same statistics as every other kernel
(shared along the path) and, once steady, is skipped in a selective run. Outside an execution a
wrapper costs one extra Python call; the context restores the functions when it exits.

A skipped call returns zeros of the shape, dtype and structure (a tuple or NumPy's named tuple of
arrays, ``scipy.linalg.cho_factor``'s flag) that the same call returned when it last ran on this
rank (the array given as ``out=``, untouched, when there is one): **its values are not
computed**, as in the reference tool, and a selective run is flagged numerically invalid. A kernel
known steady from other ranks' statistics but never run on this rank runs once, so that its
result's structure is known. After anything was skipped, a LAPACK call that does run first has
its square matrix operands replaced by a well-conditioned matrix of the same shape, dtype and
layout (``1`` on the diagonal, ``0.5 / n`` elsewhere; symmetric positive definite), and any other
operand holding NaN or infinity replaced by one with zeros there (not charged to the path), so a
factorisation never fails on stale data; the user's arrays are not written to. A code whose
control flow depends on such values (a convergence test on a skipped product) may take another
path in a selective run than in a full one; keep such tests on values that kernels do not make.

Not seen (each runs, and its time counts as computation between kernels, never skipped):

* the ``@`` operator and ``ndarray.dot``: they are slots of NumPy's array type, which cannot be
  replaced from Python; write ``numpy.matmul(a, b)`` / ``numpy.dot(a, b)`` for a kernel;
* a function bound before the context (``from numpy import dot`` at import time);
* calls whose operands are not NumPy arrays (lists, scalars only, CuPy arrays), and calls made
  inside another kernel (they are part of it).
"""
from __future__ import annotations

import contextlib
import functools
import importlib

import numpy as np

from ..runtime.compute_hooks import compute, current_compute_interceptor

__all__ = ["blas", "FUNCTIONS"]

# (module, function, kind): "blas" products; "lapack" factorizations/decompositions; "solve" the
# ones that fail on a singular or indefinite matrix (their square operands are conditioned)
FUNCTIONS = (
    ("numpy", "dot", "blas"), ("numpy", "matmul", "blas"),
    ("numpy.linalg", "cholesky", "solve"), ("numpy.linalg", "solve", "solve"), ("numpy.linalg", "inv", "solve"),
    ("numpy.linalg", "qr", "lapack"), ("numpy.linalg", "eigh", "lapack"), ("numpy.linalg", "eigvalsh", "lapack"),
    ("numpy.linalg", "svd", "lapack"),
    ("scipy.linalg", "cholesky", "solve"), ("scipy.linalg", "cho_factor", "solve"),
    ("scipy.linalg", "cho_solve", "solve"), ("scipy.linalg", "solve_triangular", "solve"),
    ("scipy.linalg", "solve", "solve"), ("scipy.linalg", "inv", "solve"), ("scipy.linalg", "lu_solve", "solve"),
    ("scipy.linalg", "qr", "lapack"), ("scipy.linalg", "lu", "lapack"), ("scipy.linalg", "lu_factor", "lapack"),
    ("scipy.linalg", "eigh", "lapack"), ("scipy.linalg", "svd", "lapack"),
)

_depth = 0
_saved: list = []
_STRUCTURE: dict = {}        # (name, signature) -> structure of the last result (shapes, dtypes)


class _Unseen(Exception):
    """The call's operands are not NumPy arrays: it runs without interception."""


def _describe(x):
    if isinstance(x, np.ndarray):
        layout = "C" if x.flags.c_contiguous else "F" if x.flags.f_contiguous else "S"
        return (x.dtype.char + layout, *(int(s) for s in x.shape))
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (tuple, list)) and len(x) <= 16:     # (c, lower), subset_by_index=[0, 4]
        return tuple(_describe(v) for v in x)
    raise _Unseen


def signature(args: tuple, kwargs: dict) -> tuple:
    """The kernel key of a call: each operand described (arrays by dtype + layout and shape,
    scalars by value, short tuples and lists element-wise), keyword arguments as ``(name, description)`` in name
    order, ``out`` left out. Raises ``_Unseen`` when no operand is a NumPy array. Local.

    >>> signature((np.ones((4, 3)), np.ones(3)), {})
    (('dC', 4, 3), ('dC', 3))
    """
    key = tuple(_describe(a) for a in args) + tuple((k, _describe(kwargs[k])) for k in sorted(kwargs) if k != "out")
    if not any(isinstance(a, np.ndarray) or (isinstance(a, tuple) and any(isinstance(v, np.ndarray) for v in a))
               for a in list(args) + list(kwargs.values())):
        raise _Unseen
    return key


def _structure(res):
    if isinstance(res, np.ndarray):
        return ("a", res.shape, res.dtype, "F" if res.flags.f_contiguous and not res.flags.c_contiguous else "C")
    if isinstance(res, tuple):
        return ("t", type(res), [_structure(v) for v in res])
    if isinstance(res, np.generic):
        return ("s", res.dtype)
    return ("v", res)


def _zeros(st):
    kind = st[0]
    if kind == "a":
        return np.zeros(st[1], st[2], order=st[3])
    if kind == "t":
        items = [_zeros(v) for v in st[2]]
        return st[1](*items) if hasattr(st[1], "_fields") else st[1](items)
    if kind == "s":
        return np.zeros((), st[1])[()]
    return st[1]


def _conditioned(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    y = np.full(x.shape, 0.5 / n, x.dtype, order="F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C")
    np.fill_diagonal(y, 1.0)
    return y


def _fix(x, condition: bool):
    if isinstance(x, tuple):
        return tuple(_fix(v, condition) for v in x)
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fc" or not x.size:
        return x
    if condition and x.ndim == 2 and x.shape[0] == x.shape[1]:
        return _conditioned(x)
    finite = np.isfinite(x)
    return x if finite.all() else np.where(finite, x, 0)


class _Call:
    """One call, run by the execution as ``call()`` (see :mod:`hpcsuite.tune.execution`)."""

    __slots__ = ("fn", "args", "kwargs", "sig", "kind", "skippable")

    def __init__(self, fn, name: str, key: tuple, kind: str, args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs, self.kind = fn, args, kwargs, kind
        self.sig = (name, key)
        self.skippable = self.sig in _STRUCTURE or isinstance(kwargs.get("out"), np.ndarray)

    def __call__(self):
        res = self.fn(*self.args, **self.kwargs)
        _STRUCTURE[self.sig] = _structure(res)
        return res

    def skipped_result(self):
        out = self.kwargs.get("out")
        if isinstance(out, np.ndarray):
            return out
        return _zeros(_STRUCTURE[self.sig])

    def reset(self) -> None:
        condition = self.kind == "solve"
        self.args = tuple(_fix(a, condition) for a in self.args)
        self.kwargs = {k: _fix(v, condition) for k, v in self.kwargs.items()}


def _wrap(name: str, fn, kind: str):
    def wrapper(*args, **kwargs):
        if current_compute_interceptor() is None:
            return fn(*args, **kwargs)
        try:
            key = signature(args, kwargs)
        except _Unseen:
            return fn(*args, **kwargs)
        call = _Call(fn, name, key, kind, args, kwargs)
        return compute(name, key, call, reset=None if kind == "blas" else call.reset)
    functools.update_wrapper(wrapper, fn)
    wrapper.__wrapped__ = fn
    return wrapper


@contextlib.contextmanager
def blas():
    """A context in which the NumPy/SciPy functions of ``FUNCTIONS`` are computation kernels
    (see the module notes; nested contexts patch once). Local.

    Examples
    --------
    >>> import numpy as np
    >>> from hpcsuite import tune
    >>> with tune.Execution(tune.Model(), "profile") as ex, tune.blas():
    ...     c = np.dot(np.ones((8, 4)), np.ones((4, 2)))
    >>> ex.result.counts["numpy.dot"]
    [1, 0]
    """
    global _depth
    if _depth == 0:
        for module, attr, kind in FUNCTIONS:
            mod = importlib.import_module(module)
            fn = getattr(mod, attr)
            _saved.append((mod, attr, fn))
            setattr(mod, attr, _wrap(f"{module}.{attr}", fn, kind))
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            while _saved:
                mod, attr, fn = _saved.pop()
                setattr(mod, attr, fn)

"""NumPy's protocols for :class:`~hpcsuite.pgas.DistArray`: which NumPy call goes where.

``__array_ufunc__`` (operators too: ``a * 2 + b`` calls ``numpy.multiply`` and ``numpy.add``):

* ``ufunc(...)``: elementwise, :func:`hpcsuite.pgas.arith.ufunc_call`; ``numpy.matmul``: SUMMA
  (:func:`hpcsuite.pgas.manipulation.matmul`);
* ``ufunc.reduce``: :func:`hpcsuite.pgas.reductions.ufunc_reduce` (associative ufuncs);
* ``ufunc.accumulate``: the distributed scan :func:`hpcsuite.pgas.scan` (``add``, ``multiply``,
  ``minimum``, ``maximum`` and other binary ufuncs it accepts; CPU and GPU arrays, the result on
  the array's device);
* ``reduceat``, ``outer``, ``at``: ``TypeError``.

``__array_function__``: the functions in :data:`FUNCTIONS`; any other NumPy function called with
a DistArray raises ``TypeError`` naming it (nothing is gathered behind the caller's back).

:func:`install` puts these handlers into ``hpcsuite.pgas.array.NUMPY_PROTOCOL``; the package's
``__init__`` calls it.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import arith, manipulation, reductions
from .array import NUMPY_PROTOCOL, DistArray
from .namespace import namespace
from .sort import scan

__all__ = ["array_ufunc", "array_function", "array_operator", "FUNCTIONS", "install",
           "supported_functions"]


def _accumulate(ufunc, a, axis=0, dtype=None, out=None):
    name = f"numpy.{ufunc.__name__}.accumulate"
    arith.check_dist(a, name)
    if dtype is not None and np.dtype(dtype) != ufunc.accumulate(np.ones(1, a.dtype)).dtype:
        raise TypeError(f"{name} on DistArrays: dtype= other than the ufunc's own is not supported")
    if isinstance(out, tuple):
        out = out[0]
    try:
        r = scan(a, ufunc, axis=axis if a.ndim > 1 else None if axis in (0, -1) else axis, out=out)
    except ValueError as exc:
        raise TypeError(f"{name}: {exc}") from None
    if out is None:
        r.auto_free = True
    return r


def _cumulative(op, func):
    def fn(a, axis=None, dtype=None, out=None):
        arith.check_dist(a, func)
        if axis is None and a.ndim > 1:
            raise TypeError(f"{func} on DistArrays: axis=None (the flattened scan) needs a 1-D array")
        if dtype is not None:
            raise TypeError(f"{func} on DistArrays: dtype= is not supported")
        r = scan(a, op, axis=axis, out=out)
        if out is None:
            r.auto_free = True
        return r
    fn.__name__ = func.rsplit(".", 1)[-1]
    fn.__doc__ = f"``{func}`` through :func:`hpcsuite.pgas.scan` (CPU and GPU arrays). Collective."
    return fn


def array_ufunc(ufunc, method, inputs, kwargs):
    """``DistArray.__array_ufunc__``. Collective."""
    if method == "__call__":
        if ufunc is np.matmul:
            return manipulation.matmul(*inputs, **kwargs)
        return arith.ufunc_call(ufunc, inputs, kwargs)
    if method == "reduce":
        if len(inputs) != 1:
            raise TypeError(f"numpy.{ufunc.__name__}.reduce takes one array")
        return reductions.ufunc_reduce(ufunc, inputs[0], **kwargs)
    if method == "accumulate":
        if len(inputs) != 1:
            raise TypeError(f"numpy.{ufunc.__name__}.accumulate takes one array")
        return _accumulate(ufunc, inputs[0], **kwargs)
    raise TypeError(f"numpy.{ufunc.__name__}.{method} is not supported on DistArrays")


def array_operator(ufunc, inputs, candidate):
    """A DistArray operator (``a * 2``, ``-a``, ``1 + a``): ``ufunc(*inputs)``, computed into
    ``candidate`` (an operand only the expression refers to) when that is a result of these
    protocols and the result fits it. Collective."""
    if (isinstance(candidate, DistArray) and candidate.auto_free and not candidate.freed
            and all(isinstance(x, (DistArray, np.ndarray, numbers.Number, np.generic)) for x in inputs)):
        return arith.ufunc_call(ufunc, inputs, {}, elide=candidate)
    return ufunc(*inputs)


def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise TypeError("numpy.where on DistArrays: only the three-argument form where(condition, x, y) "
                        "(the one-argument form's result is not a distributed array)")
    return arith.where(condition, x, y)


def _clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue,  # noqa: A002
          max=np._NoValue, **kwargs):                                                # noqa: A002
    lo = None if a_min is np._NoValue else a_min
    hi = None if a_max is np._NoValue else a_max
    if min is not np._NoValue:
        lo = min
    if max is not np._NoValue:
        hi = max
    return arith.clip(a, lo, hi, out=out, **kwargs)


def _like(fill):
    def fn(prototype, dtype=None, order="K", subok=True, shape=None, *, device=None, **kw):
        func = f"numpy.{fill}_like" if fill != "full" else "numpy.full_like"
        arith.check_dist(prototype, func, "prototype")
        if shape is not None and tuple(np.atleast_1d(shape)) != prototype.shape:
            raise TypeError(f"{func} on DistArrays: shape= other than the prototype's is not supported")
        if kw:
            raise TypeError(f"{func} on DistArrays: keyword(s) {', '.join(sorted(kw))} not supported")
        return _new_like(prototype, dtype, fill)
    return fn


def _new_like(a, dtype, fill, value=None):
    r = arith.new_array(a.shape, a.dtype if dtype is None else np.dtype(dtype), a)
    if fill == "zeros":
        r.local[...] = 0
    elif fill == "ones":
        r.local[...] = 1
    elif fill == "full":
        r.local[...] = value
    return r


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    arith.check_dist(a, "numpy.full_like", "a")
    if shape is not None and tuple(np.atleast_1d(shape)) != a.shape:
        raise TypeError("numpy.full_like on DistArrays: shape= other than the prototype's is not supported")
    return _new_like(a, dtype, "full", fill_value)


def _astype(x, dtype, /, *, copy=True, device=None):
    if device is not None:
        raise TypeError("numpy.astype on DistArrays: device= is not supported (use pgas.copy)")
    return arith.astype(x, dtype, copy=copy)


def _dtypes(*args):
    return [x.dtype if isinstance(x, DistArray) else x for x in args]


def _shape(a):
    return a.shape


def _ndim(a):
    return a.ndim


def _size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


#: NumPy function -> its DistArray implementation (every one collective unless "local" below)
FUNCTIONS = {
    np.sum: reductions.sum, np.prod: reductions.prod, np.mean: reductions.mean,
    np.var: reductions.var, np.std: reductions.std, np.min: reductions.min, np.max: reductions.max,
    np.amin: reductions.min, np.amax: reductions.max, np.argmin: reductions.argmin,
    np.argmax: reductions.argmax, np.any: reductions.any, np.all: reductions.all,
    np.transpose: manipulation.transpose, np.reshape: manipulation.reshape,
    np.concatenate: manipulation.concatenate, np.copy: arith.copy, np.where: _where, np.clip: _clip,
    np.cumsum: _cumulative("sum", "numpy.cumsum"), np.cumprod: _cumulative("prod", "numpy.cumprod"),
    np.zeros_like: _like("zeros"), np.ones_like: _like("ones"), np.empty_like: _like("empty"),
    np.full_like: _full_like,
    np.shape: _shape, np.ndim: _ndim, np.size: _size,                       # local
    np.result_type: lambda *a: np.result_type(*_dtypes(*a)),                  # local
}
if hasattr(np, "astype"):                   # NumPy >= 2.1
    FUNCTIONS[np.astype] = _astype
if hasattr(np, "matrix_transpose"):
    FUNCTIONS[np.matrix_transpose] = lambda x: manipulation.transpose(
        x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))
if hasattr(np, "permute_dims"):
    FUNCTIONS[np.permute_dims] = lambda x, axes=None: manipulation.transpose(x, axes)


def supported_functions() -> list[str]:
    """The NumPy functions handled for DistArrays, by name (sorted). Local."""
    return sorted({f.__name__ for f in FUNCTIONS})


def array_function(func, types, args, kwargs):
    """``DistArray.__array_function__``: the implementation from :data:`FUNCTIONS`, or
    ``TypeError`` naming the function. Collective (as the implementation)."""
    impl = FUNCTIONS.get(func)
    if impl is None:
        name = getattr(func, "__name__", repr(func))
        mod = getattr(func, "__module__", "numpy") or "numpy"
        if mod.startswith("numpy") and any(part.startswith("_") for part in mod.split(".")):
            mod = "numpy"               # numpy._core.fromnumeric.sum is numpy.sum to its users
        raise TypeError(f"{mod}.{name} is not supported on DistArrays (it would need a gather); "
                        f"see 'NumPy on DistArrays' in docs/pgas.md, or gather explicitly with "
                        f"a.to_numpy() (collective)")
    return impl(*args, **kwargs)


def install() -> None:
    """Make DistArray's protocols use this module (and :mod:`hpcsuite.pgas.namespace`). Local."""
    NUMPY_PROTOCOL.update(ufunc=array_ufunc, function=array_function, namespace=namespace,
                          operator=array_operator)

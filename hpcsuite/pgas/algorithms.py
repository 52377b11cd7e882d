"""Collective algorithms on :class:`~hpcsuite.pgas.DistArray` (owner computes), modelled on DASH's
``dash::fill``, ``dash::generate``, ``dash::for_each``, ``dash::transform``, ``dash::min_element``
and friends.

Every function here is collective over the array's team: all units call it with the same
arguments. Arguments are checked on every rank before any communication, so a bad call raises the
same ``ValueError`` everywhere instead of leaving some ranks waiting in a collective. An exception
raised by a user function (``fn``, ``pred``, ``op``) on one rank is carried through the closing
collective and raised on every rank too.

Each unit works on its own block (:attr:`DistArray.local`); only scalars (partial results) travel
between units, except where an input has to be redistributed to match another's pattern.
Reductions combine the per-unit partials in rank order with one ``allreduce`` of Python objects
(a tree reduction followed by a broadcast), so every rank gets the very same value.

Examples
--------
With ``mpiexec -n 3``::

    >>> a = pgas.zeros((100, 7), dist=(pgas.CYCLIC, pgas.NONE))
    >>> generate(a, lambda i, j: i + 0.5 * j)           # a[i, j] = i + j / 2
    >>> reduce(a, "max")                                 # every rank: 102.0
    >>> max_element(a)                                   # every rank: ((99, 6), 102.0)
    >>> b = transform(np.multiply, a, 2.0)               # a new array, a's pattern
    >>> find(b, pred=lambda x: x > 150)                  # every rank: (73, 5)
"""
from __future__ import annotations

import builtins
import functools
import operator
import pickle

import numpy as np
from mpi4py import MPI

from .array import DistArray, empty
from .redistribute import copy

__all__ = ["fill", "generate", "for_each", "for_each_with_index", "transform", "reduce",
           "min_element", "max_element", "find", "all", "any", "dot", "norm"]

#: Reduction / scan operators accepted by name.
NAMED_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}

_MISSING = object()


# ---------------------------------------------------------------------- argument checks (local)
def check_array(a, func: str, name: str = "a", gpu: bool = False) -> None:
    """Raise ``ValueError`` unless ``a`` is a live :class:`DistArray`, on the CPU unless ``gpu``
    (the scans run on both). Local."""
    if not isinstance(a, DistArray):
        raise ValueError(f"{func}: {name} must be a DistArray, got {type(a).__name__}")
    a.check_alive()
    if a.device.is_gpu and not gpu:
        raise ValueError(f"{func}: {name} lives on the GPU; the PGAS algorithms work on device='cpu' arrays")


def check_same(a, b, func: str, names: tuple[str, str]) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same shape and team. Local."""
    if a.shape != b.shape:
        raise ValueError(f"{func}: {names[0]} has shape {a.shape} but {names[1]} has shape {b.shape}; "
                         f"the shapes must be equal")
    if a.team.comm.Compare(b.team.comm) not in (MPI.IDENT, MPI.CONGRUENT):   # local, no messages
        raise ValueError(f"{func}: {names[0]} and {names[1]} must live on the same team")


def _check_callable(fn, func: str, name: str = "fn") -> None:
    if not callable(fn):
        raise ValueError(f"{func}: {name} must be callable, got {fn!r}")


def resolve_op(op, func: str, allow_callable: bool = False):
    """The function behind ``op``: a named op's ufunc, a binary ufunc, or (if allowed) a callable.

    Raises ``ValueError`` naming ``op`` and what is allowed. Local.
    """
    if isinstance(op, str) and op in NAMED_OPS:
        return NAMED_OPS[op]
    if isinstance(op, np.ufunc) and op.nin == 2 and op.nout == 1:
        return op
    if allow_callable and callable(op) and not isinstance(op, (str, np.ufunc)):
        return op
    allowed = "'sum', 'prod', 'min', 'max' or a binary NumPy ufunc"
    if allow_callable:
        allowed += " or an associative, commutative callable op(x, y)"
    raise ValueError(f"{func}: op must be {allowed}; got {op!r}")


def _scalar(value, dtype, func: str, name: str):
    """``value`` converted to ``dtype`` (as NumPy assignment would), or ``ValueError``."""
    if np.ndim(value) != 0:
        raise ValueError(f"{func}: {name} must be a scalar, got an array of shape {np.shape(value)}")
    try:
        return np.array(value, dtype=dtype)[()]
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{func}: {name}={value!r} cannot be stored as {dtype} ({exc})") from None


# ---------------------------------------------------------------------- collective plumbing
class _Failed:
    """An exception raised on some rank, carried through a reduction so that every rank raises it."""

    def __init__(self, exc: BaseException, rank: int):
        try:
            pickle.dumps(exc)
        except Exception:           # noqa: BLE001 - any unpicklable exception becomes a plain one
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        self.exc, self.rank = exc, rank


def _combiner(fn):
    """``fn`` lifted to partials that may be ``None`` (nothing on that rank) or a ``_Failed``."""
    def combine(x, y, *_):
        if isinstance(x, _Failed):
            return x
        if isinstance(y, _Failed) or x is None:
            return y
        if y is None:
            return x
        try:
            return fn(x, y)
        except Exception as exc:    # noqa: BLE001 - re-raised on every rank below
            return _Failed(exc, -1)
    return combine


def allreduce_guarded(team, local, fn):
    """Combine ``local()`` of every rank with ``fn`` (in rank order; ``None`` = no contribution)
    onto every rank. An exception in ``local`` or ``fn`` on any rank is raised on every rank.
    Collective: one ``allreduce``, which also acts as a barrier."""
    own = None
    try:
        part = local()
    except Exception as exc:        # noqa: BLE001 - re-raised on every rank below
        own, part = exc, _Failed(exc, team.rank)
    out = team.allreduce(part, op=_combiner(fn))
    if isinstance(out, _Failed):
        if own is not None and out.rank == team.rank:
            raise own
        exc = out.exc
        if out.rank >= 0:
            exc.add_note(f"(raised on rank {out.rank} of the team; raised on every rank)")
        raise exc
    return out


def _finish(team, body) -> None:
    """Run ``body()`` (this unit's share of an update), then synchronise: every unit's writes are
    done when any returns, and an exception on one rank is raised on all. Collective."""
    def local():
        body()
        return None
    allreduce_guarded(team, local, lambda x, y: None)


def _redistributed(x: DistArray, like: DistArray, temps: list) -> DistArray:
    """``x`` itself if its pattern is ``like``'s, else a temporary copy in ``like``'s pattern
    (appended to ``temps`` for freeing). Collective."""
    if x.pattern == like.pattern:
        return x
    tmp = empty(x.shape, x.dtype, dist=like.dist, team=like.team, grid=like.grid)
    temps.append(tmp)
    copy(x, tmp)
    return tmp


def _in_local_order(a: DistArray, block):
    """A block in storage layout rearranged to local-index order (row-major over owned indices,
    which is global row-major order restricted to this unit's elements)."""
    return a.pattern.storage_to_local(block)


def _flat_global(a: DistArray, local_shape, k: int) -> int:
    """Row-major global position of element ``k`` (flat, local-index order) of this unit."""
    lidx = np.unravel_index(k, local_shape)
    return int(np.ravel_multi_index(a.pattern.global_index(a.team.rank, lidx), a.shape))


def _global_tuple(a: DistArray, flat: int) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, a.shape))


# ---------------------------------------------------------------------- updates
def fill(a: DistArray, value) -> None:
    """Set every element of ``a`` to ``value``. Collective.

    Parameters
    ----------
    a : DistArray
    value : scalar
        Converted to ``a.dtype`` as NumPy assignment would. Halo cells are left alone
        (``a.halo.update()`` refreshes them).

    Raises
    ------
    ValueError
        On every rank, before communicating, if ``value`` is not a scalar that fits ``a.dtype``.
    """
    check_array(a, "fill")
    v = _scalar(value, a.dtype, "fill", "value")
    _finish(a.team, lambda: a.local.__setitem__(Ellipsis, v))


def generate(a: DistArray, fn) -> None:
    """Set ``a[idx] = fn(*idx)`` for every element, vectorised. Collective.

    Parameters
    ----------
    a : DistArray
    fn : callable
        Called once on every unit (also with empty index arrays on a unit owning nothing) with one
        NumPy integer array per dimension, broadcastable over :attr:`DistArray.local` (as
        :meth:`DistArray.local_global_indices` returns them); it returns the values (broadcast).

    Raises
    ------
    ValueError
        On every rank if ``fn`` is not callable; an exception raised by ``fn`` on any rank is
        raised on every rank.
    """
    check_array(a, "generate")
    _check_callable(fn, "generate")

    def body():
        a.local[...] = fn(*a.local_global_indices())
    _finish(a.team, body)


def for_each(a: DistArray, fn) -> None:
    """Call ``fn(a.local)`` once on every unit, for its side effects. Collective.

    ``fn`` may modify the block in place; it is called even when the block is empty. For TILE
    patterns the block is in tile-major storage layout. Raises ``ValueError`` if ``fn`` is not
    callable; an exception from ``fn`` on any rank is raised on every rank.
    """
    check_array(a, "for_each")
    _check_callable(fn, "for_each")
    _finish(a.team, lambda: fn(a.local))


def for_each_with_index(a: DistArray, fn) -> None:
    """Call ``fn(a.local, *index_arrays)`` once on every unit. Collective.

    ``index_arrays`` are the global indices of the block's elements, one broadcastable NumPy array
    per dimension (:meth:`DistArray.local_global_indices`). Errors as :func:`for_each`.
    """
    check_array(a, "for_each_with_index")
    _check_callable(fn, "for_each_with_index")
    _finish(a.team, lambda: fn(a.local, *a.local_global_indices()))


def _transform_dtype(op, inputs, fallback):
    """The result dtype of ``op`` on the inputs, found by applying it to empty blocks (the same on
    every rank); ``fallback`` when ``op`` cannot be applied to empty arrays."""
    probes = [np.empty(0, x.dtype) if isinstance(x, DistArray) else x for x in inputs]
    try:
        return np.asarray(op(*probes)).dtype
    except Exception:               # noqa: BLE001 - a callable that dislikes empty arrays
        return fallback


def _check_transform(op, inputs, out):
    """Validate transform's arguments; return the DistArray whose pattern the result takes."""
    if not (isinstance(op, np.ufunc) or callable(op)):
        raise ValueError(f"transform: op must be a NumPy ufunc or a vectorised callable, got {op!r}")
    if not inputs:
        raise ValueError("transform: needs at least one input")
    if isinstance(op, np.ufunc) and (op.nin != len(inputs) or op.nout != 1):
        raise ValueError(f"transform: ufunc {op.__name__} takes {op.nin} input(s) and gives {op.nout} "
                         f"output(s), but {len(inputs)} input(s) were passed (one output is supported)")
    for k, x in enumerate(inputs):
        if not isinstance(x, DistArray) and np.ndim(x) != 0:
            raise ValueError(f"transform: input {k} must be a DistArray or a scalar, got "
                             f"{type(x).__name__} of shape {np.shape(x)}")
    arrays = [(k, x) for k, x in enumerate(inputs) if isinstance(x, DistArray)]
    if out is not None:
        check_array(out, "transform", "out")
    elif not arrays:
        raise ValueError("transform: pass at least one DistArray input, or out=")
    ref, ref_name = (out, "out") if out is not None else (arrays[0][1], f"input {arrays[0][0]}")
    for k, x in arrays:
        check_array(x, "transform", f"input {k}")
        check_same(x, ref, "transform", (f"input {k}", ref_name))
    return ref


def transform(op, *inputs, out: DistArray | None = None) -> DistArray:
    """Elementwise ``out = op(*inputs)``. Collective.

    Parameters
    ----------
    op : numpy.ufunc or callable
        Applied to the local blocks (a vectorised callable receives NumPy arrays and scalars).
    *inputs : DistArray or scalar
        DistArrays of ``out``'s shape and team (any patterns: one whose pattern differs from
        ``out``'s is redistributed into a temporary first) and scalars.
    out : DistArray, optional
        Where the result goes (values cast to ``out.dtype``; may be one of the inputs). By default
        a new array with the first DistArray input's pattern and ``op``'s result dtype.

    Returns
    -------
    DistArray
        ``out``.

    Raises
    ------
    ValueError
        On every rank, before communicating: an ``op`` that is not callable or a ufunc whose
        number of inputs does not match, an input that is neither a DistArray nor a scalar,
        mismatched shapes or teams. An exception from ``op`` on any rank is raised on every rank.
    """
    ref = _check_transform(op, inputs, out)
    created = out is None
    if created:
        out = empty(ref.shape, _transform_dtype(op, inputs, ref.dtype), dist=ref.dist,
                    team=ref.team, grid=ref.grid)
    temps: list = []
    ok = False
    try:
        args = [_redistributed(x, out, temps) if isinstance(x, DistArray) else x for x in inputs]

        def body():
            # computing the whole block before assigning keeps out-aliases-an-input correct
            out.local[...] = op(*[x.local if isinstance(x, DistArray) else x for x in args])
        _finish(out.team, body)
        ok = True
    finally:
        for t in temps:
            t.free()
        if created and not ok:
            out.free()
    return out


# ---------------------------------------------------------------------- reductions
def _ufunc_supports(fn, dtype, func: str, op) -> None:
    try:
        fn.reduce(np.zeros(2, dtype))
    except Exception:               # noqa: BLE001 - e.g. no loop for this dtype
        raise ValueError(f"{func}: op {op!r} cannot reduce elements of dtype {dtype}") from None


def reduce(a: DistArray, op="sum", *, identity=None):
    """Combine all elements of ``a`` with ``op``. Collective.

    Parameters
    ----------
    a : DistArray
    op : {"sum", "prod", "min", "max"}, binary numpy.ufunc or callable
        A ufunc reduces each block with ``ufunc.reduce`` (so ``"sum"`` promotes small integers as
        ``numpy.sum`` does); a Python callable ``op(x, y)`` must be associative and commutative
        (the elements of a block are visited in storage order).
    identity : scalar, optional
        The result for an empty array (and the start of each block's fold for a callable);
        needed for an empty array when ``op`` has no identity of its own (``"min"``, ``"max"``, ...).

    Returns
    -------
    scalar
        The same value on every rank (combined in rank order).

    Raises
    ------
    ValueError
        On every rank, before communicating, for an unknown ``op``, a ufunc without a loop for
        ``a.dtype``, or an empty array with no identity.
    """
    check_array(a, "reduce")
    fn = resolve_op(op, "reduce", allow_callable=True)
    is_ufunc = isinstance(fn, np.ufunc)
    if is_ufunc:
        _ufunc_supports(fn, a.dtype, "reduce", op)
    if a.size == 0:
        if identity is not None:
            return identity
        if is_ufunc and fn.identity is not None:
            return fn.reduce(np.zeros(0, a.dtype))
        raise ValueError(f"reduce: the array is empty and op {op!r} has no identity; pass identity=")

    def local():
        if a.local.size == 0:
            return None
        flat = a.local.ravel()
        if is_ufunc:
            return fn.reduce(flat)
        return functools.reduce(fn, flat) if identity is None else functools.reduce(fn, flat, identity)
    return allreduce_guarded(a.team, local, fn)


def _extreme(a: DistArray, func: str, arg):
    """``(global_index, value)`` of the first element picked by ``arg`` (np.argmin/np.argmax)."""
    check_array(a, func)
    if a.size == 0:
        raise ValueError(f"{func}: the array is empty (shape {a.shape}); it has no {func[:3]}imum")

    def local():
        if a.local.size == 0:
            return None
        block = _in_local_order(a, a.local)
        k = int(arg(block))        # first in local order = first in global row-major order here
        return _flat_global(a, block.shape, k), block.flat[k]

    def pick(x, y):
        # arg on the two candidates in row-major order: NumPy's ordering (NaN, complex) and its
        # first-wins tie rule, so the combination equals arg on the whole array
        x, y = sorted((x, y), key=operator.itemgetter(0))
        return x if arg(np.array([x[1], y[1]], dtype=a.dtype)) == 0 else y
    flat, value = allreduce_guarded(a.team, local, pick)
    return _global_tuple(a, flat), value


def min_element(a: DistArray):
    """The position and value of the smallest element. Collective.

    Returns
    -------
    (tuple of int, scalar)
        The global index and the value, the same on every rank; ties (and NaNs) resolve as
        ``numpy.argmin`` on the whole array does: the first in row-major order.

    Raises
    ------
    ValueError
        On every rank if ``a`` is empty.
    """
    return _extreme(a, "min_element", np.argmin)


def max_element(a: DistArray):
    """The position and value of the largest element (first in row-major order, as
    ``numpy.argmax``). Collective. See :func:`min_element`."""
    return _extreme(a, "max_element", np.argmax)


def _mask(a: DistArray, value, pred, func: str):
    """This unit's boolean block (storage layout) of the elements that match."""
    m = np.asarray(pred(a.local) if pred is not None else a.local == value, dtype=bool)
    if m.shape != a.local.shape:
        raise ValueError(f"{func}: pred must return a boolean array of its argument's shape "
                         f"{a.local.shape}, got shape {m.shape}")
    return m


def find(a: DistArray, value=_MISSING, *, pred=None):
    """The first global index (row-major) where ``a == value``, or where ``pred`` is true.
    Collective.

    Parameters
    ----------
    a : DistArray
    value : scalar, optional
        The value to look for (``NaN`` is never found, as with ``==``).
    pred : callable, optional
        Vectorised predicate: ``pred(block)`` returns a boolean array of the block's shape.
        Exactly one of ``value`` and ``pred`` must be given.

    Returns
    -------
    tuple of int or None
        The same on every rank; ``None`` when nothing matches.
    """
    check_array(a, "find")
    if (value is _MISSING) == (pred is None):
        raise ValueError("find: pass exactly one of value and pred=")
    if pred is not None:
        _check_callable(pred, "find", "pred")
    elif np.ndim(value) != 0:
        raise ValueError(f"find: value must be a scalar, got an array of shape {np.shape(value)}")

    def local():
        if a.local.size == 0:
            return None
        hits = _in_local_order(a, _mask(a, value, pred, "find"))
        k = int(np.argmax(hits))
        return _flat_global(a, hits.shape, k) if hits.flat[k] else None
    flat = allreduce_guarded(a.team, local, builtins.min)
    return None if flat is None else _global_tuple(a, flat)


def _truth(a: DistArray, pred, func: str, test, combine, empty_result: bool) -> bool:
    check_array(a, func)
    if pred is not None:
        _check_callable(pred, func, "pred")

    def local():
        if a.local.size == 0:
            return None
        return bool(test(_mask(a, None, pred, func) if pred is not None else a.local))
    r = allreduce_guarded(a.team, local, combine)
    return empty_result if r is None else r


def all(a: DistArray, pred=None) -> bool:   # noqa: A001 - DASH's name, used as pgas.all
    """Whether every element is true (or satisfies the vectorised ``pred``). Collective.

    ``True`` for an empty array; the same on every rank.
    """
    return _truth(a, pred, "all", np.all, operator.and_, True)


def any(a: DistArray, pred=None) -> bool:   # noqa: A001 - DASH's name, used as pgas.any
    """Whether some element is true (or satisfies the vectorised ``pred``). Collective.

    ``False`` for an empty array; the same on every rank.
    """
    return _truth(a, pred, "any", np.any, operator.or_, False)


def dot(a: DistArray, b: DistArray):
    """The sum of the elementwise products of ``a`` and ``b`` (no complex conjugation, as
    ``numpy.dot`` of the flattened arrays). Collective.

    ``b`` is redistributed into a temporary when its pattern differs from ``a``'s.

    Returns
    -------
    scalar
        The same on every rank.

    Raises
    ------
    ValueError
        On every rank if the shapes or teams differ.
    """
    check_array(a, "dot", "a")
    check_array(b, "dot", "b")
    check_same(a, b, "dot", ("a", "b"))
    zero = np.dot(np.zeros(0, a.dtype), np.zeros(0, b.dtype))
    if a.size == 0:
        return zero
    temps: list = []
    try:
        bb = _redistributed(b, a, temps)

        def local():
            return np.dot(a.local.ravel(), bb.local.ravel()) if a.local.size else None
        r = allreduce_guarded(a.team, local, np.add)
    finally:
        for t in temps:
            t.free()
    return zero if r is None else r


_NORMS = {2: (lambda x: np.dot(x, x), np.add, np.sqrt),
          1: (np.sum, np.add, lambda s: s),
          np.inf: (np.max, np.maximum, lambda s: s)}


def _norm_key(ord):
    if ord is None or (isinstance(ord, str) and ord == "fro"):
        return 2
    if isinstance(ord, (int, float, np.integer, np.floating)) and not isinstance(ord, (bool, np.bool_)):
        if ord in (1, 2, np.inf):
            return float(ord) if ord == np.inf else int(ord)
    raise ValueError(f"norm: ord must be None, 2, 'fro' (2-norm of all elements), 1 or numpy.inf; "
                     f"got {ord!r}")


def norm(a: DistArray, ord=None):
    """A vector norm of all elements of ``a``. Collective.

    Parameters
    ----------
    ord : {None, 2, "fro", 1, numpy.inf}
        ``None``, 2 and ``"fro"``: the 2-norm (square root of the sum of squared magnitudes);
        1: the sum of magnitudes; ``inf``: the largest magnitude. Integer arrays are converted to
        float64 first.

    Returns
    -------
    float
        The same on every rank; 0 for an empty array.
    """
    check_array(a, "norm")
    local_fn, combine, final = _NORMS[_norm_key(ord)]
    # magnitudes in floating point: integers would overflow when squared
    work = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
    rdt = np.abs(np.zeros(1, work)).dtype

    def local():
        if a.local.size == 0:
            return None
        return local_fn(np.abs(a.local.astype(work, copy=False)).ravel())
    s = allreduce_guarded(a.team, local, combine) if a.size else None
    return final(rdt.type(0) if s is None else s)

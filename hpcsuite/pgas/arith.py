"""Elementwise NumPy on :class:`~hpcsuite.pgas.DistArray`: ufunc calls, ``where``, ``clip``,
``astype`` and ``copy``, and how operands of an elementwise operation are lined up.

Every function here is collective over the arrays' team and checks its arguments first, from
global metadata only (shapes, dtypes, patterns), so bad input raises the same error on every rank
before any communication.

Operands of one elementwise operation:

* DistArrays of the result's shape, on the same team and the same device kind. Those in the
  result's pattern are used in place: the operation is then local, with no communication at all.
  The others are redistributed once each (:func:`~hpcsuite.pgas.copy`, one ``MPI_Alltoallw``) into
  a temporary of the result's pattern, freed afterwards.
* The result's pattern is ``out``'s when ``out=`` is given, else that of the DistArray operand with
  the largest element size (the leftmost of equals): the smaller operands are the ones that move.
* Scalars (Python or NumPy) broadcast as in NumPy (NumPy 2's promotion rules, weak Python scalars).
* NumPy arrays broadcast to the result's shape: each rank takes its own block of the broadcast
  array (a view for BLOCKED / NONE patterns), so they must be the same on every rank. On a GPU array
  the block is copied to the device. Array-API arrays of the DistArrays' device (CuPy on GPU) work
  alike.
* DistArrays broadcast against each other only where it stays local: an operand with size-1 or
  missing leading axes (``(ny,)`` or ``(1, ny)`` against ``(nx, ny)``) whose blocks line up with
  the result's, i.e. the grid does not split the result along the broadcast axes and the operand
  is distributed like the result along the others (same specs and grid extents). The result takes
  the pattern of a full-shape operand. Other broadcasts raise ``TypeError`` naming the case
  (they would replicate data); shapes that do not broadcast raise ``ValueError``.

Results are new DistArrays (no halo) on the operands' device; they are freed when their last
reference goes (see :class:`~hpcsuite.pgas.DistArray`). A same-pattern operation involves no
communication, not even a barrier: each rank's block is complete when the call returns there; call
``a.sync()`` before reading other ranks' elements of a result one-sidedly (``a[i, j]``).
"""
from __future__ import annotations

import numbers

import numpy as np
from mpi4py import MPI

from .array import DistArray
from .pattern import Pattern
from .redistribute import copy as redistribute

__all__ = ["ufunc_call", "where", "clip", "astype", "copy", "new_array", "local_part",
           "check_dist", "broadcasts_to", "Operands"]

#: ufunc keywords handled (others raise TypeError naming them)
_UFUNC_KWARGS = {"out", "where", "dtype", "casting", "order", "subok"}


def broadcasts_to(shape, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target`` (NumPy's rule). Local."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def check_dist(x, func: str, name: str = "a") -> DistArray:
    """``x`` if it is a live DistArray, else ``TypeError`` naming ``func``. Local."""
    if not isinstance(x, DistArray):
        raise TypeError(f"{func}: {name} must be a DistArray, got {type(x).__name__}")
    x.check_alive()
    return x


#: (team, shape, dist, grid) -> Pattern of the results made with ``dist`` / ``grid`` (reductions,
#: transposes, products): building and validating a pattern per result cost more than the
#: reduction of a 1 MB block; patterns never change, so results of one layout share one.
_PATTERNS: dict = {}
_PATTERNS_MAX = 256


def _pattern(shape, dist, grid, team) -> Pattern:
    try:
        key = (team, tuple(shape), tuple(dist) if isinstance(dist, (tuple, list)) else dist,
               None if grid is None else tuple(grid))
        p = _PATTERNS.get(key)
    except TypeError:                   # an unhashable spec or grid object: no cache
        return Pattern(shape, dist, team=team, grid=grid)
    if p is None:
        p = Pattern(shape, dist, team=team, grid=grid)
        if len(_PATTERNS) >= _PATTERNS_MAX:
            _PATTERNS.pop(next(iter(_PATTERNS)))
        _PATTERNS[key] = p
    return p


def new_array(shape, dtype, like: DistArray, dist=None, grid=None) -> DistArray:
    """A new DistArray on ``like``'s team and device (``like``'s pattern unless ``dist`` /
    ``grid`` are given), freed when its last reference goes. Collective."""
    if dist is None and grid is None and tuple(shape) == like.shape:
        pattern = like.pattern                      # no re-validation
    else:
        pattern = _pattern(shape, like.dist if dist is None else dist,
                           like.grid if grid is None and dist is None else grid, like.team)
    a = DistArray.from_pattern(pattern, dtype, like.team, like.device)
    a.auto_free = True
    return a


def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic, bool)) or (isinstance(x, np.ndarray) and x.ndim == 0)


def _is_array(x) -> bool:
    """An array-like operand that is not a DistArray (NumPy, CuPy, array-API arrays)."""
    return not isinstance(x, DistArray) and hasattr(x, "shape") and hasattr(x, "dtype")


def local_part(arr, a: DistArray):
    """This rank's block of ``arr`` broadcast to ``a.shape``, in ``a.local``'s layout. Local.

    ``arr`` is a NumPy array (or one of ``a``'s array namespace) broadcastable to ``a.shape``;
    dimensions of extent 1 stay 1 (they broadcast against the block). BLOCKED / NONE dimensions
    are sliced (views); cyclic ones taken with an index array."""
    p = a.pattern
    x = arr.reshape((1,) * (a.ndim - arr.ndim) + tuple(arr.shape))
    coords = p.unit_coords(a.team.rank)
    for d, (m, c) in enumerate(zip(p.maps, coords)):
        if x.shape[d] == 1:
            continue
        if m.cyclic:
            x = x.take(m.owned(c), axis=d) if isinstance(x, np.ndarray) else \
                x.take(a.device.xp.asarray(m.owned(c)), axis=d)
        else:
            s = int(m.start(c))
            x = x[(slice(None),) * d + (slice(s, s + m.size(c)),)]
    if p.tiled:
        xp = np if isinstance(x, np.ndarray) else a.device.xp
        x = p.local_to_storage(xp.broadcast_to(x, a.local_shape))
    if a.device.is_gpu and isinstance(x, np.ndarray):
        x = a.device.asarray(x)
    return x


def _check_aligned(func: str, x: DistArray, ref: DistArray) -> None:
    """``TypeError`` unless every rank's block of ``x`` (a smaller shape that broadcasts to
    ``ref.shape``: size-1 or missing leading axes) is exactly the part of ``x`` that broadcasts
    against its block of ``ref``, so the operation stays local. That holds when the process grid
    does not split ``ref`` along the broadcast axes and ``x`` is distributed like ``ref`` along
    the others (the same specs and grid extents, hence the same rank at each grid coordinate).
    Local; from global metadata only (the same answer on every rank)."""
    nd = ref.ndim
    lead = nd - x.ndim
    xshape = (1,) * lead + x.shape
    xgrid = (1,) * lead + x.grid
    bdims = [d for d in range(nd) if xshape[d] != ref.shape[d]]
    why = None
    if ref.pattern.tiled or x.pattern.tiled:
        why = "TILE layouts store tiles contiguously, so their blocks do not broadcast"
    elif any(ref.grid[d] > 1 for d in bdims):
        d = next(d for d in bdims if ref.grid[d] > 1)
        why = (f"the result's dimension {d} is split over {ref.grid[d]} grid coordinates, so each would "
               f"need a copy of the operand's single slice")
    elif xgrid != ref.grid:
        why = f"its process grid {x.grid} does not line up with the result's {ref.grid}"
    else:
        for k in range(x.ndim):
            d = k + lead
            if d not in bdims and not x.pattern.maps[k].same_as(ref.pattern.maps[d]):
                why = (f"its dimension {k} is distributed as {x.dist[k]!r}, the result's dimension {d} "
                       f"as {ref.dist[d]!r}")
                break
    if why is not None:
        raise TypeError(f"{func}: broadcasting a DistArray of shape {x.shape} (dist {x.dist}, grid "
                        f"{x.grid}) against shape {ref.shape} (dist {ref.dist}, grid {ref.grid}) needs "
                        f"communication: {why}. Only broadcasts that stay local are supported; pass a "
                        f"NumPy array (the same on every rank) or an operand of the full shape")


class Operands:
    """Operands of one elementwise operation, checked and lined up to a reference pattern.

    ``Operands(func, values, outs)`` checks (local); :meth:`locals` redistributes what must move
    (collective) and gives the local blocks; :meth:`free` frees the temporaries (collective).
    """

    def __init__(self, func: str, values, outs=()):
        self.func, self.values, self.temps = func, list(values), []
        dists = [x for x in self.values if isinstance(x, DistArray)]
        outs = [o for o in outs if o is not None]
        for k, o in enumerate(outs):
            check_dist(o, func, "out")
        for x in dists:
            x.check_alive()
        everyone = outs + dists
        if not everyone:
            raise TypeError(f"{func}: no DistArray among the operands")
        first = everyone[0]
        try:
            self.shape = outs[0].shape if outs else np.broadcast_shapes(*(x.shape for x in dists))
        except ValueError:
            raise ValueError(f"{func}: DistArray operands of shapes "
                             f"{', '.join(str(x.shape) for x in dists)} do not broadcast") from None
        for x in everyone[1:]:
            if x.team is not first.team and \
                    x.team.comm.Compare(first.team.comm) not in (MPI.IDENT, MPI.CONGRUENT):
                raise ValueError(f"{func}: the DistArray operands must live on the same team")
            if x.device.is_gpu != first.device.is_gpu:
                raise ValueError(f"{func}: DistArray operands on different devices "
                                 f"({first.device.name} and {x.device.name}); move one with pgas.copy")
        for o in outs:
            if o.shape != self.shape:
                raise ValueError(f"{func}: out has shape {o.shape}, the result has shape {self.shape}")
        full = [x for x in dists if x.shape == self.shape]
        if outs:
            self.ref = outs[0]
        elif full:
            self.ref = max(full, key=lambda x: x.dtype.itemsize)   # max keeps the leftmost of equals
        else:
            raise TypeError(f"{func}: broadcasting DistArrays of shapes "
                            f"{', '.join(str(x.shape) for x in dists)} to {self.shape}: none of them has "
                            f"the result's shape, so the result has no pattern to take (and would need "
                            f"communication); make one operand of shape {self.shape}")
        self.broadcast = set()
        for x in dists:
            if x.shape != self.shape:
                if not np.broadcast_shapes(x.shape, self.shape) == self.shape:
                    raise ValueError(f"{func}: a DistArray of shape {x.shape} does not broadcast to "
                                     f"{self.shape}")
                _check_aligned(func, x, self.ref)
                self.broadcast.add(id(x))
        for x in self.values:
            if isinstance(x, DistArray) or _is_scalar(x) or x is None:
                continue
            if not _is_array(x):
                raise TypeError(f"{func}: operands must be DistArrays, scalars or arrays, got "
                                f"{type(x).__name__}")
            if not broadcasts_to(x.shape, self.shape):
                raise ValueError(f"{func}: an array operand of shape {tuple(x.shape)} does not broadcast "
                                 f"to the DistArrays' shape {self.shape}")
            if not isinstance(x, np.ndarray) and not first.device.is_gpu:
                raise TypeError(f"{func}: a {type(x).__name__} operand with a CPU DistArray; pass a "
                                f"NumPy array")

    def locals(self) -> list:
        """The operands as local blocks in the reference pattern. Collective (redistributes
        DistArrays in other patterns into temporaries)."""
        out = []
        ref = self.ref
        for x in self.values:
            if isinstance(x, DistArray):
                if id(x) in self.broadcast:             # checked: its block lines up with ref's
                    out.append(x.local)
                    continue
                if x is not ref and x.pattern != ref.pattern:
                    tmp = DistArray.from_pattern(ref.pattern, x.dtype, ref.team, ref.device)
                    self.temps.append(tmp)
                    redistribute(x, tmp)
                    x = tmp
                out.append(x.local)
            elif _is_array(x) and not _is_scalar(x):
                out.append(local_part(x, ref))
            else:
                out.append(x)
        return out

    def free(self) -> None:
        """Free the temporaries. Collective."""
        for t in self.temps:
            t.free()
        self.temps = []


def _probe(x):
    """An empty stand-in of an operand for NumPy's type resolution (scalars stay themselves, so
    Python scalars stay weak)."""
    if isinstance(x, DistArray) or (_is_array(x) and not _is_scalar(x)):
        return np.empty(0, np.dtype(x.dtype))
    return x


def _where_operand(where):
    return where is None or (isinstance(where, (bool, np.bool_)))


def ufunc_call(ufunc: np.ufunc, inputs, kwargs, elide: DistArray | None = None) -> "DistArray | tuple":
    """``ufunc(*inputs, **kwargs)`` elementwise on DistArrays. Collective.

    ``elide``: an operand that only the calling expression refers to (see the operators in
    :mod:`hpcsuite.pgas.array`); when the result has its dtype, shape and pattern, it is computed
    into it in place and returned (NumPy's temporary elision), else ignored.

    Supports ``out=`` (DistArrays, any pattern: the result's pattern is ``out``'s), ``where=``
    (a boolean scalar, DistArray or NumPy array, broadcast like the inputs; elements where it is
    false keep ``out``'s values, or are left uninitialised in a new array, as in NumPy), ``dtype=``
    and ``casting=``.

    Raises
    ------
    TypeError
        Unsupported keywords, operand types or type combinations (NumPy's own ``UFuncTypeError``
        from its type resolution, raised before any communication).
    ValueError
        DistArray operands of different shapes or teams, arrays that do not broadcast.
    """
    if not kwargs and ufunc.nout == 1:
        r = _same_pattern_call(ufunc, inputs, elide)
        if r is not None:
            return r
    name = f"numpy.{ufunc.__name__}"
    bad = set(kwargs) - _UFUNC_KWARGS
    if bad:
        raise TypeError(f"{name} on DistArrays: keyword(s) {', '.join(sorted(bad))} not supported")
    if kwargs.get("order", "K") != "K" or kwargs.get("subok", True) is not True:
        raise TypeError(f"{name} on DistArrays: order= and subok= are not supported")
    outs = kwargs.get("out")
    outs = () if outs is None else outs
    if not isinstance(outs, tuple):
        outs = (outs,)
    if outs and len(outs) != ufunc.nout:
        raise ValueError(f"{name}: out must hold {ufunc.nout} array(s), got {len(outs)}")
    for o in outs:
        if o is not None and not isinstance(o, DistArray):
            raise TypeError(f"{name}: out= must be DistArrays when an operand is one, got {type(o).__name__}")
    where = kwargs.get("where", True)
    opts = {k: kwargs[k] for k in ("dtype", "casting") if k in kwargs}
    ops = Operands(name, list(inputs) + ([] if _where_operand(where) else [where]), outs)
    # NumPy's own type resolution (and casting checks) on empty stand-ins: same errors, no data
    probe_out = tuple(np.empty(0, o.dtype) if o is not None else None for o in outs) or None
    res = ufunc(*(_probe(x) for x in inputs), **opts, **({"out": probe_out} if probe_out else {}))
    dtypes = [r.dtype for r in (res if isinstance(res, tuple) else (res,))]
    if not _where_operand(where):
        w = where
        if not (isinstance(w, DistArray) or _is_array(w)) or np.dtype(w.dtype) != np.bool_:
            raise TypeError(f"{name}: where= must be a boolean scalar or boolean array, got "
                            f"{getattr(w, 'dtype', type(w).__name__)}")
    if (elide is not None and not outs and ufunc.nout == 1 and _where_operand(where) and where is not False
            and elide.dtype == dtypes[0] and elide.shape == ops.shape and id(elide) not in ops.broadcast
            and (elide is ops.ref or elide.pattern == ops.ref.pattern)):
        outs = (elide,)             # a temporary nothing else refers to: its buffer takes the result
    results = []
    try:
        blocks = ops.locals()
        for k in range(ufunc.nout):
            o = outs[k] if outs else None
            if o is None:
                o = new_array(ops.shape, dtypes[k], ops.ref)
            elif o.pattern != ops.ref.pattern:         # only the first out sets the pattern
                raise ValueError(f"{name}: every out array must have the same pattern")
            results.append(o)
        w = True if _where_operand(where) else blocks.pop()
        if where is False:
            w = False
        call = {**opts, "out": tuple(r.local for r in results)}
        xp = ops.ref.device.xp
        if w is True:
            ufunc(*blocks, **call)
        elif xp is np:
            ufunc(*blocks, where=w, **call)
        elif w is not False:            # CuPy's ufuncs take no where=: compute, then select
            for r, v in zip(results, _as_tuple(ufunc(*blocks, **opts))):
                r.local[...] = xp.where(w, v, r.local)
    finally:
        ops.free()
    return results[0] if ufunc.nout == 1 else tuple(results)


_PLAIN_SCALARS = (int, float, complex, np.generic)


def _same_pattern_call(ufunc, inputs, elide):
    """The common case without the general machinery: no keywords, one output, every DistArray
    operand in one pattern (on one team and device), the others Python or NumPy scalars. ``None``
    when the case does not apply (the general path then decides, and raises what it raises).
    Collective (allocation only)."""
    ref = None
    for x in inputs:
        if isinstance(x, DistArray):
            if x.freed:
                return None
            if ref is None:
                ref = x
            elif x.team is not ref.team or (x.device is not ref.device and x.device != ref.device) or \
                    (x.pattern is not ref.pattern and x.pattern != ref.pattern):
                return None
        elif not isinstance(x, _PLAIN_SCALARS):
            return None
    if ref is None:
        return None
    # NumPy's type resolution on empty stand-ins (its errors, before any allocation)
    dt = ufunc(*(np.empty(0, x.dtype) if isinstance(x, DistArray) else x for x in inputs)).dtype
    if elide is not None and elide.dtype == dt and \
            (elide.pattern is ref.pattern or elide.pattern == ref.pattern) and \
            any(x is elide for x in inputs):
        out = elide                 # a temporary nothing else refers to takes the result
    else:
        out = new_array(ref.shape, dt, ref)
    ufunc(*(x.local if isinstance(x, DistArray) else x for x in inputs), out=out.local)
    return out


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def where(condition, x, y) -> DistArray:
    """``numpy.where(condition, x, y)``: elementwise choice. Collective.

    Operands broadcast and line up as for ufuncs (see the module notes); the result's dtype is
    ``numpy.result_type(x, y)``. The one-argument form (``nonzero``) is not supported (its result
    is not a distributed array): ``TypeError``.
    """
    name = "numpy.where"
    ops = Operands(name, [condition, x, y])
    dt = np.where(True, _probe(x), _probe(y)).dtype
    try:
        c, xl, yl = ops.locals()
        out = new_array(ops.shape, dt, ops.ref)
        xp = ops.ref.device.xp
        out.local[...] = xp.where(c if _is_scalar(c) else c.astype(bool, copy=False), xl, yl)
    finally:
        ops.free()
    return out


def clip(a, a_min=None, a_max=None, out=None, **kwargs) -> DistArray:
    """``numpy.clip(a, a_min, a_max, out=)``. Collective.

    ``a_min`` / ``a_max``: scalars, DistArrays or NumPy arrays (broadcast as for ufuncs), or
    ``None`` for no bound on that side. Computed as ``minimum(maximum(a, a_min), a_max)`` with the
    ufuncs, so the dtype rules and NaN handling are NumPy's ufuncs'.
    """
    check_dist(a, "numpy.clip")
    if kwargs:
        raise TypeError(f"numpy.clip on DistArrays: keyword(s) {', '.join(sorted(kwargs))} not supported")
    if a_min is None and a_max is None:
        raise ValueError("numpy.clip: one of a_min and a_max must be given")
    if out is not None:
        check_dist(out, "numpy.clip", "out")
    if a_min is None:
        return ufunc_call(np.minimum, (a, a_max), {"out": out} if out is not None else {})
    if a_max is None:
        return ufunc_call(np.maximum, (a, a_min), {"out": out} if out is not None else {})
    lo = ufunc_call(np.maximum, (a, a_min), {"out": out} if out is not None else {})
    return ufunc_call(np.minimum, (lo, a_max), {"out": lo})


def astype(a, dtype, copy: bool = True) -> DistArray:
    """A new array of ``dtype`` in ``a``'s pattern (``a`` itself when ``copy`` is false and the
    dtype is already ``dtype``). Collective (no communication besides allocation).

    Raises ``TypeError`` on every rank for a dtype NumPy does not know or one without an MPI type.
    """
    check_dist(a, "astype")
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"astype: {exc}") from None
    if not copy and dt == a.dtype:
        return a
    out = new_array(a.shape, dt, a)
    out.local[...] = a.local.astype(dt)
    return out


def copy(a, order="K", subok=False) -> DistArray:
    """``numpy.copy(a)``: a new array with ``a``'s values and pattern (no halo). Collective."""
    check_dist(a, "numpy.copy")
    out = new_array(a.shape, a.dtype, a)
    out.local[...] = a.local
    return out

"""Reductions of :class:`~hpcsuite.pgas.DistArray` with NumPy's signatures: ``sum``, ``prod``,
``mean``, ``var``, ``std``, ``min``, ``max``, ``argmin``, ``argmax``, ``any``, ``all`` and
``ufunc.reduce``, over all elements or along an axis, with ``keepdims``.

All are collective and check their arguments (axis, dtype, keywords) from global metadata before
any communication, so bad input raises the same error on every rank.

How (no rank ever holds more than its block plus one partial per grid coordinate):

* Over all elements (``axis=None``, or every axis of a 1-D array): each rank reduces its block to
  a partial; one ``allgather`` of the partials (a few scalars) and the same combination on every
  rank give the same scalar (a NumPy scalar, also for GPU arrays) everywhere.
* Along an axis that the process grid does not split: local, no communication. The result keeps
  the other dimensions' distributions and process grid (``TILE(b)`` becomes ``BLOCKCYCLIC(b)``: the
  same owners, plain storage).
* Along an axis the grid splits ``g`` ways: each rank reduces its block along the axis to a
  partial; the partials (``g`` along the axis) move with one :func:`~hpcsuite.pgas.copy` into a
  layout where the axis is whole on every rank, where they are combined. The result keeps the
  other dimensions' distributions on a process grid spread over them (when none of them is
  distributed, the first one becomes ``BLOCKED``).

* ``var`` / ``std`` over several (not all) axes: one step over all of them (their partial states
  do not reduce one axis after another): each rank's block to one partial, the partials along the
  split axes moved with one :func:`~hpcsuite.pgas.copy` and merged in grid order.
* ``where=`` (``sum``, ``prod``, ``mean``, ``min``, ``max``, ``any``, ``all``, ``ufunc.reduce``,
  and ``var`` / ``std``, whose partials then carry per-element counts):
  a boolean scalar, NumPy array or DistArray broadcastable to the array (lined up as the operands
  of an elementwise operation); the masked-out elements are replaced by the ufunc's identity (or
  ``initial``, required for ``min`` / ``max`` as in NumPy) in one elementwise pass, then reduced;
  ``mean`` divides the masked sum by the mask's count.

Combinations follow NumPy's rules: dtypes from NumPy itself on empty stand-ins (``sum`` of int8
is int64, ``mean`` of ints is float64), ``argmin`` / ``argmax`` return the first position in
global order (also for ties and NaNs), ``var`` / ``std`` combine per-rank (mean, sum of squared
deviations) pairs (Chan et al.), never sums of squares. Sums are not pairwise over the whole array
as NumPy's, so floating-point results agree with NumPy's to rounding, not bit for bit.
"""
from __future__ import annotations

import builtins

import numpy as np
from mpi4py import MPI

from .arith import broadcasts_to, check_dist, local_part, new_array
from .array import DistArray, empty, mpi_type
from .dist import BLOCKCYCLIC, BLOCKED, NONE
from .redistribute import copy as redistribute

__all__ = ["reduce", "ufunc_reduce", "sum", "prod", "mean", "var", "std", "min", "max", "argmin",
           "argmax", "any", "all", "REDUCIBLE"]

#: ufuncs whose ``reduce`` is supported (associative and commutative, so partials may combine in
#: any order)
REDUCIBLE = (np.add, np.multiply, np.minimum, np.maximum, np.fmin, np.fmax, np.logical_and,
             np.logical_or, np.logical_xor, np.bitwise_and, np.bitwise_or, np.bitwise_xor)


# ---------------------------------------------------------------------- kinds of reduction
#: ufunc -> the array namespace's reduction (CuPy blocks reduce through these)
_XP_NAME = {np.add: "sum", np.multiply: "prod", np.minimum: "min", np.maximum: "max",
            np.fmin: "nanmin", np.fmax: "nanmax", np.logical_and: "all", np.logical_or: "any"}


#: float64 blocks of at least this many elements are summed along their first or last axis by
#: BLAS (see ``_gemv_sum``)
GEMV_MIN = 4096
_ONES: dict = {}


def _ones(n: int) -> np.ndarray:
    v = _ONES.get(n)
    if v is None:
        if len(_ONES) > 64:
            _ONES.clear()
        v = _ONES[n] = np.ones(n)
        v.flags.writeable = False
    return v


_BLAS: list = []


def _blas_threads():
    """Threads of NumPy's BLAS now (threadpoolctl; about 2 us), ``None`` when unknown."""
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController
            libs = [c for c in ThreadpoolController().lib_controllers
                    if c.user_api == "blas" and "numpy" in str(c.filepath)]
        except Exception:       # noqa: BLE001 - no threadpoolctl view of NumPy's BLAS
            libs = []
        _BLAS.append(libs[0] if libs else None)
    c = _BLAS[0]
    try:
        return None if c is None else c.num_threads
    except Exception:           # noqa: BLE001
        return None


def _gemv_sum(block, axis):
    """The float64 sum of a C-contiguous NumPy block along its last or its first axis as one BLAS
    matrix-vector product with a vector of ones (keepdims shape), else ``None``. Local.

    Why: NumPy's ``add.reduce`` along a row reads at about 0.8 elements per cycle here, BLAS
    ``dgemv`` (OpenBLAS / MKL, vectorised, several accumulators) at memory speed: 1.3x faster on a
    1000 x 1000 block in cache at one thread, the same when memory-bound (``bench/pgas_numpy.py``
    rows ``x.sum(axis=1)`` / ``x.sum(axis=0)``). Accuracy: each output is a sum of one row (or
    column) accumulated in BLAS's vector lanes, NumPy's pairwise within a row (and plain
    accumulation down a column, as BLAS); both have errors of a few units of the last place times
    the square root of the row length on random data (measured against ``math.fsum`` in the
    tests: both within a few 1e-16 of the sum of magnitudes). Differences: an all-``-0.0`` row
    sums to ``+0.0``; ``inf`` / ``nan`` propagate as in NumPy.

    Only while NumPy's BLAS runs one thread per process (as ``runtime.threads.fit_threads`` sets
    it for the apps, and the benchmarks): BLAS's own threads on cores that the other ranks also
    use made the same product 45x slower than NumPy's single-threaded sum here (2 ranks x 2
    OpenBLAS threads on 2 cores).
    """
    if (block.dtype != np.float64 or block.ndim < 2 or block.size < GEMV_MIN
            or not block.flags.c_contiguous or type(block) is not np.ndarray or _blas_threads() != 1):
        return None
    if axis == block.ndim - 1:
        m = block.shape[-1]
        return (block.reshape(-1, m) @ _ones(m)).reshape(block.shape[:-1] + (1,))
    if axis == 0:
        n = block.shape[0]
        return (_ones(n) @ block.reshape(n, -1)).reshape((1,) + block.shape[1:])
    return None


def _ufunc_reduce(xp, ufunc, block, axis, dtype):
    name = _XP_NAME.get(ufunc)
    if name is None or xp is np:
        if ufunc is np.add and dtype == np.float64 and xp is np:
            r = _gemv_sum(block, axis)
            if r is not None:
                return r
        return ufunc.reduce(block, axis=axis, dtype=dtype, keepdims=True)
    fn = getattr(xp, name)
    if name in ("sum", "prod"):
        return fn(block, axis=axis, dtype=dtype, keepdims=True)
    return fn(block, axis=axis, keepdims=True).astype(dtype, copy=False)


class _Ufunc:
    """A ufunc reduction: partials and their combination are ``ufunc.reduce``."""

    def __init__(self, ufunc, dtype):
        self.ufunc, self.dtypes = ufunc, [np.dtype(dtype)]

    def local(self, xp, block, axis):
        return [_ufunc_reduce(xp, self.ufunc, block, axis, self.dtypes[0])]

    def combine(self, xp, parts, axis, counts):
        (s,) = parts
        if s.shape[axis] == 0:          # an empty axis: the identity (checked to exist)
            return [self.ufunc.reduce(xp.zeros(s.shape, s.dtype) if xp is np else s, axis=axis,
                                      dtype=self.dtypes[0], keepdims=True)]
        return [_ufunc_reduce(xp, self.ufunc, s, axis, self.dtypes[0])]

    def final(self, xp, state, n):
        return state[0]


class _Mean(_Ufunc):
    def __init__(self, in_dtype, dtype):
        rdt = np.mean(np.ones(1, in_dtype), dtype=dtype).dtype
        super().__init__(np.add, rdt)
        self.result = rdt

    def final(self, xp, state, n):
        with np.errstate(invalid="ignore", divide="ignore"):
            return (state[0] / n).astype(self.result, copy=False)


class _Var:
    """(mean, sum of squared deviations) per partial, merged pairwise (Chan, Golub and LeVeque)."""

    identity = True

    def __init__(self, in_dtype, dtype, ddof, root: bool):
        self.mdt = np.mean(np.ones(1, in_dtype), dtype=dtype).dtype
        self.vdt = np.var(np.ones(1, in_dtype), dtype=dtype).dtype
        self.dtypes = [self.mdt, self.vdt]
        self.ddof, self.root = ddof, root

    def local(self, xp, block, axis):
        m = xp.mean(block, axis=axis, dtype=self.mdt, keepdims=True)
        d = block - m
        d = (d.real ** 2 + d.imag ** 2) if d.dtype.kind == "c" else d * d
        return [m, xp.sum(d, axis=axis, dtype=self.vdt, keepdims=True)]

    def combine(self, xp, parts, axis, counts):
        means, m2s = parts
        g = means.shape[axis]
        if g == 0:
            shape = list(means.shape)
            shape[axis] = 1
            return [xp.full(shape, np.nan, self.mdt), xp.full(shape, np.nan, self.vdt)]

        def at(x, k):
            return x[(slice(None),) * axis + (slice(k, k + 1),)]
        na, ma, qa = float(counts[0]), at(means, 0), at(m2s, 0)
        for k in range(1, g):
            nb, mb, qb = float(counts[k]), at(means, k), at(m2s, k)
            n = na + nb
            d = mb - ma
            dd = (d.real ** 2 + d.imag ** 2) if d.dtype.kind == "c" else d * d
            ma = ma + d * (nb / n)
            qa = qa + qb + dd * (na * nb / n)
            na = n
        return [ma.astype(self.mdt, copy=False), qa.astype(self.vdt, copy=False)]

    def final(self, xp, state, n):
        with np.errstate(invalid="ignore", divide="ignore"):
            v = state[1] / builtins.max(n - self.ddof, 0)
        v = v.astype(self.vdt, copy=False)
        return xp.sqrt(v) if self.root else v


class _MaskedVar:
    """(count, mean, sum of squared deviations) per element of the partial, over the elements a
    mask selects (``var``/``std`` with ``where=``); merged as :class:`_Var`, with per-element
    counts (a partial that selected nothing has count 0 and changes nothing)."""

    def __init__(self, in_dtype, dtype, ddof, root: bool, mask):
        v = _Var(in_dtype, dtype, ddof, root)
        self.mdt, self.vdt, self.ddof, self.root = v.mdt, v.vdt, ddof, root
        self.dtypes = [np.dtype(np.float64), self.mdt, self.vdt]
        self.mask = mask            # the mask's block, in the order of the blocks passed to local

    def local(self, xp, block, axis):
        w = self.mask.reshape(block.shape)
        c = xp.sum(w, axis=axis, dtype=np.float64, keepdims=True)
        s = xp.sum(xp.where(w, block, 0), axis=axis, dtype=self.mdt, keepdims=True)
        m = (s / xp.where(c > 0, c, 1)).astype(self.mdt, copy=False)
        d = xp.where(w, block - m, 0)
        d = (d.real ** 2 + d.imag ** 2) if d.dtype.kind == "c" else d * d
        return [c, m, xp.sum(d, axis=axis, dtype=self.vdt, keepdims=True)]

    def combine(self, xp, parts, axis, counts):
        cs, means, m2s = parts
        shape = list(means.shape)
        shape[axis] = 1

        def at(x, k):
            return x[(slice(None),) * axis + (slice(k, k + 1),)]
        na, ma, qa = xp.zeros(shape, np.float64), xp.zeros(shape, self.mdt), xp.zeros(shape, self.vdt)
        for k in range(means.shape[axis]):
            nb, mb, qb = at(cs, k), at(means, k), at(m2s, k)
            n = na + nb
            f = nb / xp.where(n > 0, n, 1)
            d = mb - ma
            dd = (d.real ** 2 + d.imag ** 2) if d.dtype.kind == "c" else d * d
            ma = (ma + d * f).astype(self.mdt, copy=False)
            qa = (qa + qb + dd * (na * f)).astype(self.vdt, copy=False)
            na = n
        return [na, ma, qa]

    def final(self, xp, state, n):
        with np.errstate(invalid="ignore", divide="ignore"):
            v = (state[2] / xp.maximum(state[0] - self.ddof, 0)).astype(self.vdt, copy=False)
        return xp.sqrt(v) if self.root else v


class _Arg:
    """(value, global index) of the first extreme along the axis."""

    def __init__(self, in_dtype, name: str):
        self.name, self.dtypes = name, [np.dtype(in_dtype), np.dtype(np.intp)]
        self.map, self.coord = None, 0          # set per call: the axis' map and my coordinate

    def local(self, xp, block, axis):
        k = xp.expand_dims(getattr(xp, self.name)(block, axis=axis), axis)
        v = xp.take_along_axis(block, k, axis=axis)
        return [v, self.map.glob(self.coord, k).astype(np.intp)]

    def combine(self, xp, parts, axis, counts):
        v, i = parts
        order = xp.argsort(i, axis=axis)
        v, i = xp.take_along_axis(v, order, axis=axis), xp.take_along_axis(i, order, axis=axis)
        j = xp.expand_dims(getattr(xp, self.name)(v, axis=axis), axis)
        return [xp.take_along_axis(v, j, axis=axis), xp.take_along_axis(i, j, axis=axis)]

    def final(self, xp, state, n):
        return state[1]


class _Flat:
    """A 1-D map over the row-major flattened array for the argmin/argmax over all elements:
    ``glob(unit, k)`` is the flat global index of local element ``k`` of ``unit``."""

    def __init__(self, a: DistArray):
        self.a = a

    def glob(self, unit, k):
        p = self.a.pattern
        xp = self.a.device.xp
        k_host = np.asarray(self.a.device.to_host(k)).reshape(-1)
        lidx = np.unravel_index(k_host, p.local_shape(unit)) if p.local_size(unit) else ()
        gidx = [np.asarray(m.glob(c, li)) for m, c, li in zip(p.maps, p.unit_coords(unit), lidx)]
        flat = np.ravel_multi_index(gidx, self.a.shape) if gidx else k_host
        return xp.asarray(np.asarray(flat).reshape(k.shape))


# ---------------------------------------------------------------------- argument checks (local)
def _axis(axis, ndim: int, func: str, allow_tuple: bool):
    """``axis`` as ``None`` or a sorted tuple of distinct non-negative ints (same error on every
    rank for a bad one)."""
    if axis is None:
        return None
    items = axis if isinstance(axis, tuple) else (axis,)
    if isinstance(axis, tuple) and not allow_tuple:
        raise TypeError(f"{func}: axis must be None or an int for DistArrays, got the tuple {axis!r}")
    out = []
    for ax in items:
        if isinstance(ax, (bool, np.bool_)) or not isinstance(ax, (int, np.integer)):
            raise TypeError(f"{func}: axis must be None, an int or a tuple of ints, got {axis!r}")
        if not -ndim <= ax < ndim:
            raise np.exceptions.AxisError(int(ax), ndim)
        out.append(int(ax) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{func}: duplicate value in axis {axis!r}")
    return tuple(sorted(out))


def _check_common(func, a, out, where, extra, where_ok: bool = False):
    check_dist(a, f"numpy.{func}")
    if extra:
        raise TypeError(f"numpy.{func} on DistArrays: keyword(s) {', '.join(sorted(extra))} not supported")
    if not where_ok and not _all_true(where):
        raise TypeError(f"numpy.{func} on DistArrays: where= is not supported")
    if where_ok and not _all_true(where):
        _check_where(func, a, where)
    if out is not None and not isinstance(out, DistArray):
        raise TypeError(f"numpy.{func}: out must be a DistArray, got {type(out).__name__}")


def _all_true(where) -> bool:
    return where is True or (isinstance(where, np.bool_) and bool(where))


def _check_where(func, a, where) -> None:
    """``where=``: a boolean scalar, or a boolean NumPy / DistArray array broadcastable to
    ``a.shape`` (NumPy's rule). Local; the same error on every rank."""
    if isinstance(where, (bool, np.bool_)):
        return
    if not (hasattr(where, "shape") and hasattr(where, "dtype")):
        raise TypeError(f"numpy.{func}: where= must be a boolean scalar or array, got {type(where).__name__}")
    if np.dtype(where.dtype) != np.bool_:
        raise TypeError(f"numpy.{func}: where= must be boolean, got dtype {np.dtype(where.dtype)} "
                        f"(cannot cast safely to bool)")
    if not broadcasts_to(where.shape, a.shape):
        raise ValueError(f"numpy.{func}: where= of shape {tuple(where.shape)} does not broadcast to the "
                         f"array's shape {a.shape}")


def _mask(a: DistArray, where):
    """``where`` broadcast to a boolean DistArray in ``a``'s pattern (freed when dropped).
    Collective (local, or the redistribution of a DistArray mask in another pattern)."""
    m = new_array(a.shape, np.bool_, a)
    if isinstance(where, (bool, np.bool_)):
        m.local[...] = bool(where)
    else:
        np.logical_and(where, True, out=m)
    return m


def _filled(a: DistArray, where, value) -> DistArray:
    """``a`` with the elements where ``where`` is false replaced by ``value`` (``a``'s dtype).
    Collective (elementwise)."""
    from .arith import where as select
    fill = np.asarray(value).astype(a.dtype)[()]
    if isinstance(where, (bool, np.bool_)):
        r = new_array(a.shape, a.dtype, a)
        r.local[...] = a.local if where else fill
        return r
    return select(where, a, fill)


# ---------------------------------------------------------------------- the engine
def _host_scalar(a: DistArray, x):
    return np.asarray(a.device.to_host(x))


def _over_all(a: DistArray, kind, keepdims: bool):
    """Reduce every element: partial per rank, one allgather, the same combination everywhere."""
    xp = a.device.xp
    block = a.local
    if a.pattern.tiled:
        block = a.pattern.storage_to_local(block)
    n = block.size
    if isinstance(kind, _Arg):
        kind.map, kind.coord = _Flat(a), a.team.rank
    op = _allreduce_op(kind, a)
    if op is not None:
        # sum, prod, mean, any, all, bitwise: one Allreduce of one element (no pickling), as
        # Heat's torch sum + Allreduce (the allgather of pickled partials cost more than the sum
        # of a 1 MB block)
        dt = kind.dtypes[0]
        if n:
            part = np.array(_host_scalar(a, kind.local(xp, block.reshape(-1), 0)[0]), dtype=dt).reshape(1)
        else:
            part = kind.ufunc.reduce(np.zeros(0, dt), dtype=dt, keepdims=True)
        if a.team.size > 1:
            a.team.Allreduce(MPI.IN_PLACE, part, op=op)
        res = np.asarray(kind.final(np, [part], a.size)).reshape(())
        return _scalar_array(a, (1,) * a.ndim, res) if keepdims else res[()]
    if n:
        part = [_host_scalar(a, s).reshape(1) for s in kind.local(xp, block.reshape(-1), 0)]
    else:
        part = None
    parts = a.team.allgather(part)
    valid = [(k, p) for k, p in enumerate(parts) if p is not None]
    counts = [a.pattern.local_size(k) for k, _ in valid]
    stacked = [np.concatenate([p[j] for _, p in valid]) if valid else np.empty(0, dt)
               for j, dt in enumerate(kind.dtypes)]
    state = kind.combine(np, stacked, 0, counts)
    res = np.asarray(kind.final(np, state, a.size)).reshape(())
    if keepdims:
        return _scalar_array(a, (1,) * a.ndim, res)
    return res[()]


def _scalar_array(a: DistArray, shape, value) -> DistArray:
    """A new DistArray of ``shape`` (all ones) holding ``value``. Collective."""
    dist = (BLOCKED,) + (NONE,) * (len(shape) - 1)
    r = new_array(shape, value.dtype, a, dist=dist)
    r.local[...] = value[()]
    return r


def _plain(spec):
    return BLOCKCYCLIC(spec.block) if spec.kind == "tile" else spec


def _along(a: DistArray, kind, axis: int, keepdims: bool) -> DistArray:
    """Reduce along one axis; a DistArray result (see the module notes for its pattern)."""
    xp = a.device.xp
    p = a.pattern
    nd = a.ndim
    specs = tuple(_plain(s) for s in p.dist)
    g = p.grid[axis]
    coords = p.unit_coords(a.team.rank)
    amap = p.maps[axis]
    if isinstance(kind, _Arg):
        kind.map, kind.coord = amap, coords[axis]
    block = p.storage_to_local(a.local) if p.tiled else a.local

    def partial():
        if block.shape[axis] == 0 or block.size == 0:
            shape = list(block.shape)
            shape[axis] = 1
            return [xp.zeros(shape, dt) for dt in kind.dtypes]
        return kind.local(xp, block, axis)

    def drop(seq, fill):
        return seq[:axis] + ((fill,) if keepdims else ()) + seq[axis + 1:]

    rshape = drop(a.shape, 1)
    if g == 1:
        state = partial()
        if a.shape[axis] == 0:
            state = kind.combine(xp, [s[(slice(None),) * axis + (slice(0, 0),)] for s in state], axis, [])
        res = kind.final(xp, state, a.shape[axis])
        r = new_array(rshape, res.dtype, a, dist=drop(specs, NONE), grid=drop(p.grid, 1))
        r.local[...] = res if keepdims else res.reshape(r.local.shape)
        return r
    others = [d for d in range(nd) if d != axis and specs[d].kind != "none"]
    wdist = list(specs)
    wdist[axis] = NONE
    if not others:
        first = next(d for d in range(nd) if d != axis)
        wdist[first] = BLOCKED
    wgrid = tuple(1 if s.kind == "none" else 0 for s in wdist)
    op = _allreduce_op(kind, a)
    if op is not None and builtins.all(p.grid[d] == 1 for d in range(nd) if d != axis) and not p.tiled:
        return _along_allreduce(a, kind, axis, keepdims, op, partial, rshape, drop(tuple(wdist), NONE),
                                drop(wgrid, 1))
    # partials: g along the axis, one per grid coordinate, in the array's own grid
    tshape = a.shape[:axis] + (g,) + a.shape[axis + 1:]
    tdist = specs[:axis] + (BLOCKED,) + specs[axis + 1:]
    temps = []
    try:
        parts = []
        for j, (st, dt) in enumerate(zip(partial(), kind.dtypes)):
            t = empty(tshape, dt, dist=tdist, team=a.team, grid=p.grid, device=a.device)
            temps.append(t)
            t.local[...] = st
            w = empty(tshape, dt, dist=tuple(wdist), team=a.team, grid=wgrid, device=a.device)
            temps.append(w)
            redistribute(t, w)
            parts.append(w.local)
        nvalid = builtins.sum(1 for c in range(g) if amap.size(c) > 0)
        counts = [amap.size(c) for c in range(nvalid)]
        cut = (slice(None),) * axis + (slice(0, nvalid),)
        state = kind.combine(xp, [x[cut] for x in parts], axis, counts)
        res = kind.final(xp, state, a.shape[axis])
        r = new_array(rshape, res.dtype, a, dist=drop(tuple(wdist), NONE), grid=drop(temps[1].grid, 1))
        r.local[...] = res if keepdims else res.reshape(r.local.shape)
    finally:
        for t in temps:
            t.free()
    return r


#: ufunc -> the MPI reduction that combines its partials (buffers, no pickling)
_MPI_OPS = {np.add: MPI.SUM, np.multiply: MPI.PROD, np.logical_and: MPI.LAND, np.logical_or: MPI.LOR,
            np.logical_xor: MPI.LXOR, np.bitwise_and: MPI.BAND, np.bitwise_or: MPI.BOR,
            np.bitwise_xor: MPI.BXOR}


def _allreduce_op(kind, a: DistArray):
    """The MPI op for ``kind``'s partials if one ``Allreduce`` can combine them, else ``None``
    (min/max: NaN propagation; var, arg*: ordered merges). The same answer on every rank."""
    if type(kind) not in (_Ufunc, _Mean, _Truth) or kind.ufunc not in _MPI_OPS:
        return None
    try:
        mpi_type(kind.dtypes[0])
    except ValueError:
        return None
    return _MPI_OPS[kind.ufunc]


def _along_allreduce(a, kind, axis, keepdims, op, partial, rshape, rdist, rgrid) -> DistArray:
    """Reduce along ``axis`` when every other dimension is whole on every rank (e.g. rows
    BLOCKED, reduced over the rows): each rank's partial covers the whole result, one
    ``Allreduce`` combines them, and each rank keeps its block of the result. Collective."""
    xp = a.device.xp
    block = a.local
    if block.shape[axis] == 0:              # nothing along the axis here: the ufunc's identity
        shape = list(block.shape)
        shape[axis] = 0
        part = kind.ufunc.reduce(np.zeros(shape, kind.dtypes[0]), axis=axis, dtype=kind.dtypes[0],
                                 keepdims=True)
    else:
        part = np.ascontiguousarray(a.device.to_host(partial()[0]), dtype=kind.dtypes[0])
    a.team.Allreduce(MPI.IN_PLACE, part, op=op)
    res = kind.final(np, [part], a.shape[axis])
    if not keepdims:
        res = res.reshape(rshape)
    r = new_array(rshape, res.dtype, a, dist=rdist, grid=rgrid)
    r.local[...] = local_part(res, r)          # (copied to the device for GPU arrays)
    return r


def _along_many(a: DistArray, kind, axes, keepdims: bool) -> DistArray:
    """Reduce over several axes at once (``var``/``std``, whose partial states do not reduce one
    axis after the other): each rank reduces its block over all of ``axes`` to one partial state;
    where the grid splits some of them, the partials (one per grid coordinate along the split
    axes) move with one :func:`~hpcsuite.pgas.copy` into a layout where those axes are whole on
    every rank, and are merged there in grid order. Collective; no communication when no axis of
    ``axes`` is split."""
    xp = a.device.xp
    p = a.pattern
    nd = a.ndim
    specs = tuple(_plain(s) for s in p.dist)
    block = p.storage_to_local(a.local) if p.tiled else a.local
    split = [d for d in axes if p.grid[d] > 1]

    def drop(seq, fill):
        if keepdims:
            return tuple(fill if d in axes else x for d, x in enumerate(seq))
        return tuple(x for d, x in enumerate(seq) if d not in axes)

    def partial():
        if block.size == 0:
            shape = tuple(1 if d in axes else n for d, n in enumerate(block.shape))
            return [xp.zeros(shape, dt) for dt in kind.dtypes]
        return kind.local(xp, block, axes)

    n = int(np.prod([a.shape[d] for d in axes]))
    rshape = drop(a.shape, 1)
    if not split:
        res = kind.final(xp, partial(), n)
        r = new_array(rshape, res.dtype, a, dist=drop(specs, NONE), grid=drop(p.grid, 1))
        r.local[...] = res if keepdims else res.reshape(r.local.shape)
        return r
    wdist = [NONE if d in axes else specs[d] for d in range(nd)]
    if builtins.all(wdist[d].kind == "none" for d in range(nd) if d not in axes):
        wdist[next(d for d in range(nd) if d not in axes)] = BLOCKED
    wdist = tuple(wdist)
    wgrid = tuple(1 if s.kind == "none" else 0 for s in wdist)
    tshape = tuple(p.grid[d] if d in split else (1 if d in axes else a.shape[d]) for d in range(nd))
    tdist = tuple(BLOCKED if d in split else (NONE if d in axes else specs[d]) for d in range(nd))
    # the element count behind each partial, in C order over the split axes' grid coordinates
    sizes = [[p.maps[d].size(c) for c in range(p.grid[d])] for d in split]
    local_n = int(np.prod([a.shape[d] for d in axes if d not in split]))
    counts = [local_n * int(np.prod(c)) for c in _product(sizes)]
    valid = [k for k, c in enumerate(counts) if c > 0]
    temps = []
    try:
        parts = []
        for st, dt in zip(partial(), kind.dtypes):
            t = empty(tshape, dt, dist=tdist, team=a.team, grid=p.grid, device=a.device)
            temps.append(t)
            t.local[...] = st
            w = empty(tshape, dt, dist=wdist, team=a.team, grid=wgrid, device=a.device)
            temps.append(w)
            redistribute(t, w)
            x = xp.moveaxis(w.local, split, list(range(len(split))))
            x = x.reshape((len(counts),) + x.shape[len(split):])
            parts.append(x[xp.asarray(valid, dtype=np.intp)] if len(valid) < len(counts) else x)
        state = kind.combine(xp, parts, 0, [counts[k] for k in valid])
        wl = temps[1].local.shape
        state = [s.reshape(tuple(1 if d in split else e for d, e in enumerate(wl))) for s in state]
        res = kind.final(xp, state, n)
        r = new_array(rshape, res.dtype, a, dist=drop(wdist, NONE), grid=drop(temps[1].grid, 1))
        r.local[...] = res if keepdims else res.reshape(r.local.shape)
    finally:
        for t in temps:
            t.free()
    return r


def _product(lists):
    import itertools
    return list(itertools.product(*lists))


def _run(a: DistArray, make_kind, axes, keepdims: bool, out, together: bool = False):
    """Reduce ``a`` over ``axes`` (None or a sorted tuple) with a fresh kind per step (or in one
    step over all of them: ``together``)."""
    if axes is None or len(axes) == a.ndim:
        res = _over_all(a, make_kind(), keepdims)
    elif together and len(axes) > 1:
        res = _along_many(a, make_kind(), axes, keepdims)
    else:
        res, cur = a, None
        for ax in sorted(axes, reverse=True):         # the later axes first: indices stay valid
            nxt = _along(res, make_kind(), ax, keepdims)
            if cur is not None:
                cur.free()
            res = cur = nxt
    return _to_out(res, out)


def _to_out(res, out):
    if out is None:
        return res
    if not isinstance(res, DistArray):
        raise TypeError("a reduction to a scalar cannot write into a DistArray out=; drop out=")
    if out.shape != res.shape:
        raise ValueError(f"out has shape {out.shape}, the result has shape {res.shape}")
    redistribute(res, out)
    res.free()
    return out


# ---------------------------------------------------------------------- public reductions
def ufunc_reduce(ufunc, a, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue,
                 where=True):
    """``ufunc.reduce(a, axis, dtype, out, keepdims, initial)`` for the ufuncs in
    :data:`REDUCIBLE`. Collective.

    Raises
    ------
    TypeError
        Another ufunc (non-associative, e.g. ``subtract``), ``where=``, or a dtype without a loop.
    ValueError
        A zero-size reduction with a ufunc that has no identity (as NumPy), a bad axis.
    """
    name = f"{ufunc.__name__}.reduce"
    if ufunc not in REDUCIBLE:
        raise TypeError(f"numpy.{name} is not supported on DistArrays (only associative, commutative "
                        f"ufuncs: {', '.join(u.__name__ for u in REDUCIBLE)})")
    _check_common(name, a, out, where, (), where_ok=True)
    axes = _axis(axis, a.ndim, f"numpy.{name}", allow_tuple=True)
    try:
        rdt = ufunc.reduce(np.empty((1,), a.dtype), dtype=dtype).dtype
    except Exception as exc:        # noqa: BLE001 - NumPy's own type error, raised alike everywhere
        raise TypeError(f"numpy.{name}: {exc}") from None
    masked = not _all_true(where)
    if masked and ufunc.identity is None and initial is np._NoValue:
        raise ValueError(f"reduction operation '{ufunc.__name__}' does not have an identity, so to use "
                         f"a where mask one has to specify 'initial'")
    n = a.size if axes is None else int(np.prod([a.shape[d] for d in axes]))
    if n == 0 and ufunc.identity is None and initial is np._NoValue:
        raise ValueError(f"zero-size array to reduction operation {ufunc.__name__} which has no identity")
    if n == 0 and initial is not np._NoValue and ufunc.identity is None:
        raise TypeError(f"numpy.{name}: initial= on an empty reduction is not supported on DistArrays")
    if masked:              # elements outside the mask: the identity (or initial), then reduce
        a = _filled(a, where, ufunc.identity if ufunc.identity is not None else initial)
    res = _run(a, lambda: _Ufunc(ufunc, rdt), axes, keepdims, out if initial is np._NoValue else None)
    if initial is not np._NoValue:
        res = _apply_initial(ufunc, res, initial, rdt, out)
    return res


def _apply_initial(ufunc, res, initial, rdt, out):
    if isinstance(res, DistArray):
        return ufunc(res, rdt.type(initial), out=res if out is None else out)
    return ufunc(res, rdt.type(initial))


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):  # noqa: A001
    """``numpy.sum``: a scalar (the same on every rank) for ``axis=None``, else a DistArray.
    Collective."""
    return ufunc_reduce(np.add, a, axis, dtype, out, keepdims, initial, where)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    """``numpy.prod``; as :func:`sum`. Collective."""
    return ufunc_reduce(np.multiply, a, axis, dtype, out, keepdims, initial, where)


def min(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):  # noqa: A001
    """``numpy.min`` (NaN propagates). ``ValueError`` for an empty reduction. Collective."""
    return ufunc_reduce(np.minimum, a, axis, None, out, keepdims, initial, where)


def max(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):  # noqa: A001
    """``numpy.max`` (NaN propagates). ``ValueError`` for an empty reduction. Collective."""
    return ufunc_reduce(np.maximum, a, axis, None, out, keepdims, initial, where)


def any(a, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    """``numpy.any``: a bool (or a boolean DistArray along an axis). Collective."""
    return _truth(np.logical_or, "any", a, axis, out, keepdims, where)


def all(a, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    """``numpy.all``: a bool (or a boolean DistArray along an axis). Collective."""
    return _truth(np.logical_and, "all", a, axis, out, keepdims, where)


def _truth(ufunc, func, a, axis, out, keepdims, where):
    _check_common(func, a, out, where, (), where_ok=True)
    axes = _axis(axis, a.ndim, f"numpy.{func}", allow_tuple=True)
    if not _all_true(where):
        a = _filled(a, where, ufunc.identity)
    res = _run(a, lambda: _Truth(ufunc), axes, keepdims, out)
    return res


class _Truth(_Ufunc):
    def __init__(self, ufunc):
        super().__init__(ufunc, np.dtype(bool))

    def local(self, xp, block, axis):
        f = xp.any if self.ufunc is np.logical_or else xp.all
        return [f(block, axis=axis, keepdims=True)]


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """``numpy.mean`` (float64 for integer input, as NumPy). Over several axes: the mean of the
    means along each (equal to NumPy's up to rounding). Collective."""
    _check_common("mean", a, out, where, (), where_ok=True)
    axes = _axis(axis, a.ndim, "numpy.mean", allow_tuple=True)
    _mean_dtype(a, dtype, "mean")
    if _all_true(where):
        return _run(a, lambda: _Mean(a.dtype, dtype), axes, keepdims, out)
    # the sum over the mask divided by the mask's count (NumPy's definition; NaN where it is empty)
    rdt = _Mean(a.dtype, dtype).dtypes[0]
    s = _run(_filled(a, where, 0), lambda: _Ufunc(np.add, rdt), axes, keepdims, None)
    c = _run(_mask(a, where), lambda: _Ufunc(np.add, rdt), axes, keepdims, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        res = s / c
    return _to_out(res, out)


def _mean_dtype(a, dtype, func):
    try:
        np.mean(np.ones(1, a.dtype), dtype=dtype)
    except Exception as exc:        # noqa: BLE001
        raise TypeError(f"numpy.{func}: {exc}") from None


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
        correction=None):
    """``numpy.var`` (``ddof``; ``correction`` as the array API's name of it) over ``axis``:
    ``None``, an int or a tuple of ints, ``where=`` (as for :func:`sum`). Collective. ``mean=``
    raises ``TypeError``."""
    return _var("var", a, axis, dtype, out, ddof, keepdims, where, mean, correction, False)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
        correction=None):
    """``numpy.std``: the square root of :func:`var`. Collective."""
    return _var("std", a, axis, dtype, out, ddof, keepdims, where, mean, correction, True)


def _var(func, a, axis, dtype, out, ddof, keepdims, where, mean_, correction, root):
    _check_common(func, a, out, where, ("mean",) if mean_ is not None else (), where_ok=True)
    if correction is not None:
        if ddof != 0:
            raise ValueError(f"numpy.{func}: ddof and correction can't be provided simultaneously.")
        ddof = correction
    axes = _axis(axis, a.ndim, f"numpy.{func}", allow_tuple=True)
    _mean_dtype(a, dtype, func)
    if isinstance(ddof, (bool, np.bool_)) or not isinstance(ddof, (int, float, np.integer, np.floating)):
        raise TypeError(f"numpy.{func}: ddof must be a number, got {ddof!r}")
    if _all_true(where):
        return _run(a, lambda: _Var(a.dtype, dtype, ddof, root), axes, keepdims, out, together=True)
    m = _mask(a, where)
    block = m.local if not a.pattern.tiled else a.pattern.storage_to_local(m.local)
    return _run(a, lambda: _MaskedVar(a.dtype, dtype, ddof, root, block), axes, keepdims, out, together=True)


def argmin(a, axis=None, out=None, *, keepdims=False):
    """``numpy.argmin``: the first position of the smallest value (flat index for
    ``axis=None``). Collective."""
    return _argx("argmin", a, axis, out, keepdims)


def argmax(a, axis=None, out=None, *, keepdims=False):
    """``numpy.argmax``: the first position of the largest value. Collective."""
    return _argx("argmax", a, axis, out, keepdims)


def _argx(func, a, axis, out, keepdims):
    _check_common(func, a, out, True, ())
    if isinstance(axis, tuple):
        raise TypeError(f"numpy.{func}: axis must be None or an int, got {axis!r}")
    axes = _axis(axis, a.ndim, f"numpy.{func}", allow_tuple=False)
    n = a.size if axes is None else a.shape[axes[0]]
    if n == 0:
        raise ValueError(f"attempt to get {func} of an empty sequence")
    return _run(a, lambda: _Arg(a.dtype, func), axes, keepdims, out)


def reduce(ufunc, a, **kwargs):
    """``ufunc.reduce(a, **kwargs)``: see :func:`ufunc_reduce`. Collective."""
    return ufunc_reduce(ufunc, a, **kwargs)

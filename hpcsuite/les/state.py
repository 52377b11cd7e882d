"""The model state: prognostic fields as PGAS arrays, and the context every term sees.

Fields are :class:`hpcsuite.pgas.DistArray` s of global shape ``(nx, ny, nz)`` (``w``:
``(nx, ny, nz + 1)``), ``BLOCKED`` in x and y over a 2-D process grid, ``NONE`` in z, with a periodic
halo of :data:`~hpcsuite.les.grid.HALO` cells in x and y (corners included: the cross terms of the
momentum advection read diagonal neighbours). Terms work on the local blocks *with* halo, plain
NumPy/CuPy arrays: ``ctx.fields['u']`` is ``store.arrays['u'].local_with_halo``, so updating its halo
updates the array the terms read.

A *term* is any callable ``term(ctx) -> None`` that adds tendencies into ``ctx.tend`` (interior
only) or writes diagnostics into ``ctx.diag``; the terms of :mod:`hpcsuite.les.model` follow that contract.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from .. import pgas
from ..runtime import Team, grid_shape
from ..runtime.device import strict_device_of
from .grid import HALO, Grid

__all__ = ["FieldStore", "StepContext", "add_at", "process_grid", "zeros_in_one_buffer", "zgrid_on", "zgrid_of"]


def process_grid(team_size: int, nx: int, ny: int, dims=(0, 0), h: int = HALO) -> tuple[int, int]:
    """The ``(px, py)`` process grid for ``team_size`` ranks. Local.

    Raises ``ValueError`` (same text on every rank) when ``dims`` cannot hold the ranks or a block
    would be narrower than the halo ``h`` (the halo must come from the next rank alone).
    """
    px, py = grid_shape(team_size, [int(d) for d in dims])
    for n, p, ax in ((nx, px, "x"), (ny, py, "y")):
        if n // p < h:
            raise ValueError(f"{n} cells along {ax} over {p} ranks gives blocks of {n // p} cells, fewer "
                             f"than the halo width {h}; use more cells or fewer ranks along {ax}")
    return px, py


def add_at(a, index, value) -> None:
    """``a[index] += value`` in place through a view (``index``: slices, integers, Ellipsis). Local.

    Python runs ``a[index] += value`` as a read, an add and a write back: on a GPU that is a second
    kernel (the copy of the result onto itself); adding into the view is one.
    """
    view = a[index]
    view += value


def zeros_in_one_buffer(xp, like: dict, pad_to: int = 1):
    """``(buffer, {name: array})``: zero arrays shaped as the arrays of ``like``, all C-contiguous
    views of one 1-D ``buffer`` (zero-padded to a multiple of ``pad_to`` elements), so that one
    operation on the buffer covers them all. ``buffer`` is None (and the arrays separate) when the
    dtypes differ. Local."""
    dtypes = {a.dtype for a in like.values()}
    if len(dtypes) != 1:
        return None, {n: xp.zeros_like(a) for n, a in like.items()}
    sizes = [math.prod(a.shape) for a in like.values()]
    device = strict_device_of(xp, like.values())
    kw = {} if device is None else {"device": device}
    buf = xp.zeros(-(-sum(sizes) // pad_to) * pad_to, dtype=dtypes.pop(), **kw)
    offsets = np.cumsum([0] + sizes)
    return buf, {n: xp.reshape(buf[int(o):int(o) + k], a.shape)
                 for (n, a), o, k in zip(like.items(), offsets, sizes)}


def zgrid_on(grid: Grid, xp, device=None) -> SimpleNamespace:
    """The vertical grid arrays ``zf, zh, dzf, dzh`` (and reciprocals ``rdzf, rdzh``) on ``xp``
    (on ``device`` when given: the strict array-API checker keeps arrays on a non-default device).

    Also the linear interpolation weights from full levels to the inner half levels ``zh[1:nz]``:
    ``wlo`` of the level below (``k - 1``) and ``whi`` of the level above (``k``), computed once
    here rather than in every term call (two kernel launches each on a GPU).
    """
    kw = {} if device is None else {"device": device}
    put = (lambda a: xp.asarray(np.ascontiguousarray(a, dtype=np.float64), **kw))
    dzf, dzh = np.asarray(grid.dzf, dtype=np.float64), np.asarray(grid.dzh, dtype=np.float64)
    return SimpleNamespace(zf=put(grid.zf), zh=put(grid.zh), dzf=put(dzf), dzh=put(dzh),
                           rdzf=put(1.0 / dzf), rdzh=put(1.0 / dzh),
                           wlo=put(dzf[1:] / (2.0 * dzh[1:-1])), whi=put(dzf[:-1] / (2.0 * dzh[1:-1])))


def zgrid_of(ctx) -> SimpleNamespace:
    """The vertical grid arrays of a step context: ``ctx.zgrid`` (see :func:`zgrid_on`). Local.

    A :class:`StepContext` makes them when it is created; a context without them (a term called on
    a plain namespace, as in tests) gets them made on ``ctx.xp`` and kept as ``ctx.zgrid``.
    """
    zg = getattr(ctx, "zgrid", None)
    if zg is None:
        zg = ctx.zgrid = zgrid_on(ctx.grid, ctx.xp)
    return zg


class FieldStore:
    """The distributed prognostic fields. Creating one is collective over ``team``.

    Parameters
    ----------
    grid : Grid
        The global grid (its block description is ignored; :attr:`grid` is this rank's block).
    team : Team
        The ranks.
    names : sequence of str
        Field names; ``'w'`` gets ``nz + 1`` levels, every other name is a cell-type field.
    dims : (int, int)
        Process grid in x and y (0 = choose).
    device : {"cpu", "gpu"}
        Where the local blocks live.
    """

    #: how many sets of arrays :meth:`update_halo` keeps a halo group for
    GROUPS_KEPT = 8

    def __init__(self, grid: Grid, team: Team, names, dims=(0, 0), device: str = "cpu"):
        self.team, self.device = team, device
        self.dims = process_grid(team.size, grid.nx, grid.ny, dims)
        self._kw = dict(dist=(pgas.BLOCKED, pgas.BLOCKED, pgas.NONE), team=team, grid=(*self.dims, 1),
                        halo=(HALO, HALO, 0), boundary=("periodic", "periodic", "none"), corners=True,
                        device=device)
        self.global_grid = grid
        self.arrays: dict[str, pgas.DistArray] = {}
        self._scratch: dict[int, pgas.DistArray] = {}
        self._groups: dict = {}                     # HaloGroups of update_halo, by their arrays
        for name in names:
            self.add(name)
        probe = self.arrays[next(iter(self.arrays))] if self.arrays else self._make(grid.nz)
        sx, sy, _ = probe.local_slices
        self.grid = grid.block(sx.start, sy.start, sx.stop - sx.start, sy.stop - sy.start, HALO)
        if not self.arrays:
            probe.free()

    def _make(self, nzl: int) -> pgas.DistArray:
        g = self.global_grid
        return pgas.zeros((g.nx, g.ny, nzl), **self._kw)

    def add(self, name: str) -> pgas.DistArray:
        """Add a zero field (collective)."""
        if name in self.arrays:
            raise ValueError(f"field {name!r} exists already")
        a = self._make(self.global_grid.nz + (1 if name == "w" else 0))
        self.arrays[name] = a
        return a

    @property
    def names(self) -> list[str]:
        return list(self.arrays)

    def local(self, name: str):
        """The local block with halo of field ``name`` (a view: writes go into the field)."""
        return self.arrays[name].local_with_halo

    def locals(self) -> dict:
        """``{name: local block with halo}`` for every field."""
        return {n: a.local_with_halo for n, a in self.arrays.items()}

    def update_halo(self, *arrays) -> None:
        """Fill the x/y halos of ``arrays`` from the neighbouring ranks (periodic). Collective.

        Each array is a field's local block (updated in place, no copy), or any array of local shape
        ``(nxl+2h, nyl+2h[, m])`` (e.g. an eddy viscosity or a 2-D surface field), which is updated
        in place through the halo plan of a scratch distributed array of the same layout (C-contiguous
        float64 arrays), or copied through that array (others). The arrays are updated together: on a
        GPU the wrap-around copies of all of them are one kernel launch (``pgas.HaloGroup``).
        """
        members, fast, slow = [], [], []
        for array in arrays:
            field = next((a for a in self.arrays.values() if a.local_with_halo is array), None)
            if field is not None:
                members.append((field, None))
                fast.append(array)
                continue
            g = self.grid
            if array.shape[:2] != (g.nxl + 2 * g.h, g.nyl + 2 * g.h) or array.ndim not in (2, 3):
                raise ValueError(f"update_halo: array of local shape {array.shape} does not fit the block "
                                 f"({g.nxl + 2 * g.h}, {g.nyl + 2 * g.h}[, m])")
            s = self._scratch_for(array.shape[2] if array.ndim == 3 else 1)
            buf = s.local_with_halo
            flags = getattr(array, "flags", None)           # (NumPy and CuPy arrays have them)
            if flags is not None and flags.c_contiguous and array.dtype == buf.dtype:
                members.append((s, array.reshape(buf.shape)))   # in place (a contiguous reshape is a view)
                fast.append(array)
            else:
                slow.append((s, array))
        if len(members) == 1:
            a, t = members[0]
            a.halo.update(target=t)
        elif members:
            self._group(members, fast).update()
        for s, array in slow:
            buf = s.local_with_halo
            buf[...] = array.reshape(buf.shape)
            s.halo.update()
            array[...] = buf.reshape(array.shape)

    def _scratch_for(self, m: int) -> pgas.DistArray:
        s = self._scratch.get(m)
        if s is None:
            s = self._scratch[m] = self._make(m)
        return s

    def _group(self, members, arrays) -> pgas.HaloGroup:
        """The HaloGroup of ``members`` ((array, target) pairs made from the caller's ``arrays``),
        made once per set of arrays (a group keeps the arrays' addresses)."""
        key = tuple(id(a) for a in arrays)
        kept = self._groups.get(key)
        if kept is None or any(k is not a for k, a in zip(kept[0], arrays)):    # (an id reused)
            kept = self._groups[key] = (tuple(arrays), pgas.HaloGroup([a for a, _ in members],
                                                                       [t for _, t in members]))
            while len(self._groups) > self.GROUPS_KEPT:   # (holding arrays alive: keep few)
                self._groups.pop(next(iter(self._groups)))
        return kept[1]

    def free(self) -> None:
        """Release every distributed array. Collective."""
        for a in list(self.arrays.values()) + list(self._scratch.values()):
            a.free()
        self.arrays.clear()
        self._scratch.clear()
        self._groups.clear()


class StepContext:
    """What a term sees during one Runge-Kutta substep (see the interface contract).

    Attributes
    ----------
    grid : Grid
        Global grid plus this rank's block (``i0, j0, nxl, nyl, h``).
    xp : module
        Array namespace of the fields (numpy or cupy).
    team : Team
        The ranks (collectives such as horizontal means go through it).
    h : int
        Halo width in x and y.
    fields : dict
        ``name -> local array with halo``; halos are valid on entry to a term.
    tend : dict
        ``name -> tendency array`` of the same shape; terms *add* (only the interior matters).
    diag : dict
        Diagnostics written by a term for later terms ('ql', 'T', 'thv', 'ekm', 'ekh', 'surface', ...).
    base : SimpleNamespace
        Reference state (``presf, presh, exnf, exnh, th0, thvref``).
    profiles : dict
        1-D ``xp`` arrays (nz) for forcings ('ug', 'vg', 'wfls', ...).
    params : dict
        The deck's physics tables.
    t, dt : float
        Time at the start of the substep and the substep's step (RK coefficient x dt).
    dt_full : float
        The full time step of the RK3 step.
    rk_stage : int
        0, 1 or 2.
    zgrid : SimpleNamespace
        ``zf, zh, dzf, dzh, rdzf, rdzh`` as ``xp`` arrays (for kernels).
    start : dict
        The prognostic fields at the start of the RK3 step (the pressure projection needs them).
    galilean : (float, float)
        The Galilean shift ``(cu, cv)``: the fields are relative to a frame moving with it.
    """

    def __init__(self, grid: Grid, xp, team: Team, fields: dict, store: FieldStore | None = None,
                 base=None, profiles=None, params=None, t: float = 0.0, dt: float = 0.0):
        self.grid, self.xp, self.team, self.h = grid, xp, team, grid.h
        self.fields = fields
        self.store = store
        # the tendencies are views of one buffer, so zeroing them all is one pass (one kernel launch
        # on a GPU instead of one per field)
        self._tend_all, self.tend = zeros_in_one_buffer(xp, fields)
        self.diag: dict = {}
        self.base = base if base is not None else SimpleNamespace(th0=300.0)
        self.profiles = profiles if profiles is not None else {}
        self.params = params if params is not None else {}
        self.t, self.dt, self.dt_full, self.rk_stage = float(t), float(dt), float(dt), 0
        self.zgrid = zgrid_on(grid, xp, strict_device_of(xp, fields.values()))
        self.start: dict = {}
        self.galilean = (0.0, 0.0)

    def update_halo(self, *arrays) -> None:
        """Fill the x/y halos of fields or any block-shaped arrays, together. Collective (see
        :meth:`FieldStore.update_halo`); a periodic fill without a store (one-rank use only)."""
        if self.store is not None:
            self.store.update_halo(*arrays)
            return
        for array in arrays:
            _periodic_fill(array, self.h)

    def update_halos(self, names=None) -> None:
        """Update the halos of the named fields (all by default). Collective."""
        for n in (self.fields if names is None else names):
            self.update_halo(self.fields[n])

    def zero_tendencies(self) -> None:
        if self._tend_all is not None:
            self._tend_all[...] = 0.0
            return
        for a in self.tend.values():
            a[...] = 0.0

    @property
    def interior(self) -> tuple[slice, slice]:
        return self.grid.interior


def _periodic_fill(a, h: int) -> None:
    """Periodic halo of a single-rank block (corners included), in place."""
    a[:h] = a[-2 * h:-h]
    a[-h:] = a[h:2 * h]
    a[:, :h] = a[:, -2 * h:-h]
    a[:, -h:] = a[:, h:2 * h]

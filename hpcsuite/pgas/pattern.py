"""Patterns: how an N-D index space is distributed over the units (ranks) of a team.

A :class:`Pattern` combines one distribution spec per dimension (:mod:`hpcsuite.pgas.dist`) with a
process grid. Building one is non-collective and allocates nothing; every query is closed-form
arithmetic whose cost does not grow with the number of units (a pattern over 100,000 units is as
cheap as one over 4), so any rank can answer "who owns this element, and where" without
communication.

Units are numbered row-major over the process grid, like ``MPI_Cart_create`` without reordering.

Examples
--------
>>> p = Pattern((37, 5), (BLOCKCYCLIC(4), NONE), team=3)   # 3 units, simulated (no MPI needed)
>>> p.grid
(3, 1)
>>> p.unit_at((10, 2)), p.local_index((10, 2))
(2, (2, (2, 2)))
>>> p.local_shape(0), p.local_shape(1), p.local_shape(2)
((13, 5), (12, 5), (12, 5))
"""
from __future__ import annotations

import math
import operator
from typing import Sequence

import numpy as np

from ..runtime import ProcessGrid, Team, grid_shape
from .dist import BLOCKED, NONE, DimMap, DistSpec, as_spec

__all__ = ["Pattern"]


def _as_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise ValueError(f"shape must be a non-negative integer or a tuple of them, got {shape!r}") from None
    if not out or any(n < 0 for n in out):
        raise ValueError(f"shape must be a non-empty tuple of non-negative integers, got {shape!r}")
    return out


def _as_dist(dist, ndim: int) -> tuple[DistSpec, ...]:
    if isinstance(dist, (DistSpec, str)):
        return (as_spec(dist),) + (NONE,) * (ndim - 1)
    specs = tuple(as_spec(d) for d in dist)
    if len(specs) != ndim:
        raise ValueError(f"dist has {len(specs)} entries for a {ndim}-D shape")
    return specs


class Pattern:
    """The distribution of an N-D index space over a team. Non-collective; allocates nothing.

    Parameters
    ----------
    shape : int or tuple of int
        Global extents (any, including uneven and zero).
    dist : DistSpec or sequence of DistSpec
        One spec per dimension; a single spec distributes dimension 0 and leaves the others
        ``NONE`` (as DASH's default).
    team : Team, int or None
        The units: a :class:`~hpcsuite.runtime.Team`, or a number of units (to simulate a pattern
        without MPI, e.g. over 100,000 units); the world team when omitted.
    grid : sequence of int or ProcessGrid, optional
        Process-grid extents per dimension (0 = choose, as ``MPI_Dims_create``). By default the
        units are spread over the distributed (non-``NONE``) dimensions.

    Raises
    ------
    ValueError
        On every rank alike: a bad shape, a spec that does not fit its grid extent (``NONE`` with
        more than one unit, ``TILE`` mixed with other distributed specs or with a partial tile),
        or a grid whose extents do not multiply to the number of units.
    """

    def __init__(self, shape, dist=BLOCKED, team=None, grid=None):
        self.shape = _as_shape(shape)
        self.ndim = len(self.shape)
        self.dist = _as_dist(dist, self.ndim)
        if team is None:
            team = Team.world()
        if isinstance(team, Team):
            self.team, self.nunits = team, team.size
        elif isinstance(team, (int, np.integer)) and not isinstance(team, bool) and team > 0:
            self.team, self.nunits = None, int(team)
        else:
            raise ValueError(f"team must be a Team or a positive number of units, got {team!r}")
        self.grid = self._grid_dims(grid)
        self.maps = tuple(DimMap(s, n, p) for s, n, p in zip(self.dist, self.shape, self.grid))
        kinds = {s.kind for s in self.dist}
        self.tiled = "tile" in kinds
        if self.tiled and kinds - {"tile", "none"}:
            raise ValueError(f"TILE cannot be mixed with other distributed dimensions, got {self.dist}")
        # row-major strides of the unit numbering over the grid
        self._ustride = tuple(math.prod(self.grid[d + 1:]) for d in range(self.ndim))
        #: unit -> storage shape, filled by the arrays of this pattern (a pattern never changes)
        self.storage_cache: dict = {}
        #: the global geometry as a hashable key (the same on every unit)
        self.layout_key = (self.shape, tuple((s.kind, s.block) for s in self.dist), self.grid)

    def _grid_dims(self, grid) -> tuple[int, ...]:
        if isinstance(grid, ProcessGrid):
            grid = grid.dims
        if grid is None:
            distributed = [d for d, s in enumerate(self.dist) if s.kind != "none"]
            if not distributed:
                if self.nunits != 1:
                    raise ValueError(f"every dimension is NONE, so the array cannot be spread over "
                                     f"{self.nunits} units; distribute at least one dimension")
                return (1,) * self.ndim
            dims = [1] * self.ndim
            for d, e in zip(distributed, grid_shape(self.nunits, len(distributed))):
                dims[d] = e
            return tuple(dims)
        grid = tuple(grid)
        if len(grid) != self.ndim:
            raise ValueError(f"grid has {len(grid)} extents for a {self.ndim}-D shape")
        grid = tuple(0 if (g == 0 and s.kind != "none") else (1 if g == 0 else g)
                     for g, s in zip(grid, self.dist))
        for d, (g, s) in enumerate(zip(grid, self.dist)):
            if s.kind == "none" and g != 1:
                raise ValueError(f"dimension {d} is NONE but the process grid has {g} units along it")
        try:
            return grid_shape(self.nunits, list(grid))
        except ValueError:
            raise ValueError(f"a process grid {'x'.join(str(g) if g else '?' for g in grid)} cannot hold "
                             f"{self.nunits} units") from None

    def __repr__(self) -> str:
        return (f"Pattern(shape={self.shape}, dist=({', '.join(map(repr, self.dist))}), "
                f"grid={self.grid}, units={self.nunits})")

    def __eq__(self, other) -> bool:
        """Same global shape and the same owner and local index for every element."""
        return (isinstance(other, Pattern) and self.shape == other.shape and self.grid == other.grid
                and self.tiled == other.tiled
                and all(a.same_as(b) for a, b in zip(self.maps, other.maps)))

    __hash__ = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    # ------------------------------------------------------------------ units and coordinates
    def unit_coords(self, unit: int) -> tuple[int, ...]:
        """Process-grid coordinates of ``unit``."""
        self._check_unit(unit)
        return tuple((unit // s) % g for s, g in zip(self._ustride, self.grid))

    def unit_of(self, coords: Sequence[int]) -> int:
        """The unit at process-grid coordinates ``coords``."""
        return sum(c * s for c, s in zip(coords, self._ustride))

    def _check_unit(self, unit) -> None:
        if not 0 <= unit < self.nunits:
            raise IndexError(f"unit {unit} is outside a pattern over {self.nunits} units")

    def _check_gidx(self, gidx) -> tuple[int, ...]:
        if isinstance(gidx, (int, np.integer)):
            gidx = (gidx,)
        gidx = tuple(int(i) for i in gidx)
        if len(gidx) != self.ndim or any(not 0 <= i < n for i, n in zip(gidx, self.shape)):
            raise IndexError(f"index {gidx if len(gidx) > 1 else gidx[0]} is out of bounds for "
                             f"global shape {self.shape}")
        return gidx

    # ------------------------------------------------------------------ element queries
    def unit_at(self, gidx) -> int:
        """The unit owning global index ``gidx``. O(ndim)."""
        gidx = self._check_gidx(gidx)
        return sum(m.owner(i) * s for m, i, s in zip(self.maps, gidx, self._ustride))

    def local_index(self, gidx) -> tuple[int, tuple[int, ...]]:
        """``(unit, local_index)`` of global index ``gidx``. O(ndim).

        The local index is the element's N-D coordinate within its owner's local extents
        (:meth:`local_shape`); :meth:`storage_index` maps it into the owner's storage.
        """
        gidx = self._check_gidx(gidx)
        unit = sum(m.owner(i) * s for m, i, s in zip(self.maps, gidx, self._ustride))
        return unit, tuple(int(m.local(i)) for m, i in zip(self.maps, gidx))

    def global_index(self, unit: int, lidx) -> tuple[int, ...]:
        """Global index of local index ``lidx`` on ``unit``. O(ndim)."""
        coords = self.unit_coords(unit)
        if isinstance(lidx, (int, np.integer)):
            lidx = (lidx,)
        lidx = tuple(int(i) for i in lidx)
        ls = self.local_shape(unit)
        if len(lidx) != self.ndim or any(not 0 <= i < n for i, n in zip(lidx, ls)):
            raise IndexError(f"local index {lidx} is out of bounds for unit {unit}'s local shape {ls}")
        return tuple(int(m.glob(c, i)) for m, c, i in zip(self.maps, coords, lidx))

    def is_local(self, gidx, unit: int) -> bool:
        """Whether ``unit`` owns ``gidx``."""
        return self.unit_at(gidx) == unit

    # ------------------------------------------------------------------ per-unit extents
    def local_shape(self, unit: int) -> tuple[int, ...]:
        """Local extents of ``unit``: how many indices it owns along each dimension."""
        return tuple(m.size(c) for m, c in zip(self.maps, self.unit_coords(unit)))

    def local_size(self, unit: int) -> int:
        return math.prod(self.local_shape(unit))

    def max_local_shape(self) -> tuple[int, ...]:
        return tuple(m.max_size() for m in self.maps)

    def owned_indices(self, unit: int) -> tuple[np.ndarray, ...]:
        """Per dimension, the sorted global indices ``unit`` owns; it owns their Cartesian product."""
        return tuple(m.owned(c) for m, c in zip(self.maps, self.unit_coords(unit)))

    def owned_blocks(self, unit: int):
        """The global blocks (tuples of slices) ``unit`` owns, as a generator of the product of
        the per-dimension runs of consecutive indices (one block for BLOCKED patterns)."""
        import itertools
        runs = [m.owned_runs(c) for m, c in zip(self.maps, self.unit_coords(unit))]
        for combo in itertools.product(*runs):
            yield tuple(slice(s, s + n) for s, n in combo)

    def local_global_indices(self, unit: int) -> tuple[np.ndarray, ...]:
        """Global index arrays broadcastable over ``unit``'s local storage (see :meth:`storage_shape`):
        ``a.local`` element at storage position ``p`` has global index ``tuple(ix[p] for ix in result)``."""
        owned = self.owned_indices(unit)
        if not self.tiled:
            return tuple(np.reshape(o, [-1 if d == k else 1 for k in range(self.ndim)])
                         for d, o in enumerate(owned))
        out = []
        nd = self.ndim
        for d, (o, b) in enumerate(zip(owned, self.tile_shape)):
            tiles = o.reshape(-1, b)          # (tiles along d, tile extent)
            shape = [1] * (2 * nd)
            shape[d], shape[nd + d] = tiles.shape
            out.append(tiles.reshape(shape))
        return tuple(out)

    # ------------------------------------------------------------------ storage layout
    @property
    def tile_shape(self) -> tuple[int, ...]:
        """Tile extents of a TILE pattern (a NONE dimension is one tile of its full extent)."""
        return tuple(m.b if m.spec.kind == "tile" else m.n for m in self.maps)

    def storage_shape(self, unit: int) -> tuple[int, ...]:
        """Shape of ``unit``'s local storage: :meth:`local_shape`, or for TILE patterns
        ``(tiles_0, ..., tiles_{n-1}, tile_0, ..., tile_{n-1})`` with each tile contiguous."""
        ls = self.local_shape(unit)
        if not self.tiled:
            return ls
        ts = self.tile_shape
        return tuple(n // b if b else 0 for n, b in zip(ls, ts)) + ts

    def storage_index(self, lidx) -> tuple[int, ...]:
        """Position in local storage of local index ``lidx`` (identity unless tiled)."""
        if not self.tiled:
            return tuple(lidx)
        ts = self.tile_shape
        return tuple(i // b for i, b in zip(lidx, ts)) + tuple(i % b for i, b in zip(lidx, ts))

    def local_to_storage(self, lview: np.ndarray) -> np.ndarray:
        """Rearrange an array in local-index order (shape :meth:`local_shape`) into storage order."""
        if not self.tiled:
            return lview
        nd, ts = self.ndim, self.tile_shape
        split = []
        for n, b in zip(lview.shape, ts):
            split += [n // b if b else 0, b]       # b == 0: an empty dimension (n == 0 too)
        perm = list(range(0, 2 * nd, 2)) + list(range(1, 2 * nd, 2))
        return lview.reshape(split).transpose(perm)

    def storage_to_local(self, storage: np.ndarray) -> np.ndarray:
        """Rearrange local storage into local-index order (a copy for TILE patterns)."""
        if not self.tiled:
            return storage
        nd = self.ndim
        perm = [k for d in range(nd) for k in (d, nd + d)]
        shape = tuple(storage.shape[d] * storage.shape[nd + d] for d in range(nd))
        return storage.transpose(perm).reshape(shape)

    # ------------------------------------------------------------------ derived patterns
    def with_team(self, team) -> "Pattern":
        """The same distribution over another team of the same size."""
        return Pattern(self.shape, self.dist, team=team, grid=self.grid)

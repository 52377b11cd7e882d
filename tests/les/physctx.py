"""Test helpers for the LES physics terms: real step contexts on real (distributed) field stores.

``make_ctx`` builds the same :class:`~hpcsuite.les.state.StepContext` the model uses, over a
:class:`~hpcsuite.les.state.FieldStore` on the given team (one rank or several), and fills the local
blocks, halos included, from global NumPy arrays by periodic indexing (so a test knows the global
field and can compare with NumPy on it).
"""
from __future__ import annotations

import numpy as np

from hpcsuite.les.grid import Grid
from hpcsuite.les.state import FieldStore, StepContext


def make_ctx(team, grid: Grid, fields: dict, base=None, profiles=None, params=None, dt=1.0):
    """A step context whose fields are the global arrays ``fields`` (name -> (nx, ny, nz[+1]))."""
    store = FieldStore(grid, team, list(fields))
    g = store.grid
    ctx = StepContext(g, np, team, store.locals(), store=store, base=base, profiles=profiles,
                      params=params, dt=dt)
    for name, glob in fields.items():
        ctx.fields[name][...] = local_block(g, np.asarray(glob, dtype=np.float64))
    return ctx


def local_block(g: Grid, glob):
    """This rank's block with halo of a global array (x, y periodic), by index wrapping."""
    ix = np.arange(g.i0 - g.h, g.i0 + g.nxl + g.h) % g.nx
    iy = np.arange(g.j0 - g.h, g.j0 + g.nyl + g.h) % g.ny
    return glob[np.ix_(ix, iy)]


def interior(ctx, a):
    g = ctx.grid
    return np.asarray(a[g.h:g.h + g.nxl, g.h:g.h + g.nyl])


def gather_interior(ctx, a):
    """The global array assembled from every rank's interior (on every rank). Collective."""
    g = ctx.grid
    blocks = ctx.team.allgather((g.i0, g.j0, interior(ctx, a)))
    shape = (g.nx, g.ny) + tuple(a.shape[2:])
    out = np.zeros(shape)
    for i0, j0, b in blocks:
        out[i0:i0 + b.shape[0], j0:j0 + b.shape[1]] = b
    return out


def coords(grid: Grid):
    """Global 3-D coordinate arrays: cell centres (xc, yc, zc), u points xu, v points yv, w levels zw."""
    xc = (np.arange(grid.nx) + 0.5) * grid.dx
    yc = (np.arange(grid.ny) + 0.5) * grid.dy
    xu = np.arange(grid.nx) * grid.dx
    yv = np.arange(grid.ny) * grid.dy
    return xc, yc, np.asarray(grid.zf), xu, yv, np.asarray(grid.zh)

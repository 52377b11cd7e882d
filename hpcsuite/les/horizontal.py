"""Horizontal (slab) reductions of the LES's local blocks over all ranks.

A local block carries a halo in x and y (``(nxl+2h, nyl+2h, m)``); a slab sum adds its interior
columns over the whole domain, one number per level. The thermodynamics (the mean virtual
temperature of the buoyancy) and the statistics use these; both are collective.

Examples
--------
>>> import numpy as np
>>> from types import SimpleNamespace
>>> from hpcsuite.les.grid import Grid
>>> g = Grid.uniform(4, 4, 2, 400.0, 400.0, 200.0)
>>> one_rank = SimpleNamespace(size=1)
>>> ctx = SimpleNamespace(xp=np, grid=g, h=g.h, team=one_rank)
>>> a = np.ones(g.cell_shape)
>>> horizontal_mean(ctx, a)
array([1., 1.])
"""
from __future__ import annotations

import numpy as np

from ..runtime.device import to_host

__all__ = ["horizontal_sums", "horizontal_mean"]


def horizontal_sums(ctx, arrays):
    """Sums over the whole domain's columns of several local arrays, one vector each. Collective.

    Each array is a local block with halo (``(nxl+2h, nyl+2h, m)``, or 2-D); only the interior is
    summed. All sums travel in one ``Allreduce``: a host round trip of ``sum(m)`` numbers (on one
    rank the result stays on the device).

    Parameters
    ----------
    ctx : StepContext
        Uses ``ctx.xp``, ``ctx.grid`` (``nxl``, ``nyl``), ``ctx.h`` and ``ctx.team``.
    arrays : sequence of xp arrays
        The local blocks.

    Returns
    -------
    list of xp arrays
        The global column sums (length ``m``; 2-D inputs give length-1 vectors).
    """
    xp, g, h = ctx.xp, ctx.grid, ctx.h
    parts = []
    for a in arrays:
        s = a[h:h + g.nxl, h:h + g.nyl, ...]
        if type(s).__module__.split(".")[0] == "cupy" and s.ndim == 3:
            # CuPy gives a reduction over (0, 1) one thread block per level, each striding through
            # memory (a tenth of a 512 x 512 x 128 step on an H200); over y first, every thread owns
            # one (x, level) and neighbouring threads read neighbouring levels. Rounding as any GPU
            # sum's: not NumPy's order.
            parts.append(xp.sum(xp.sum(s, axis=1), axis=0))
            continue
        parts.append(xp.reshape(xp.sum(s, axis=(0, 1)), (-1,)))
    sizes = [int(p.shape[0]) for p in parts]
    if ctx.team.size > 1:
        buf = np.concatenate([np.asarray(to_host(p), dtype=np.float64) for p in parts])
        out = np.empty_like(buf)
        ctx.team.Allreduce(buf, out)
        if getattr(xp, "__name__", "").startswith("array_api_strict"):    # (on the fields' device)
            flat = xp.asarray(out, device=arrays[0].device)
        else:
            flat = xp.asarray(out)
        parts, o = [], 0
        for n in sizes:
            parts.append(flat[o:o + n])
            o += n
    return parts


def horizontal_mean(ctx, a):
    """The horizontal (slab) mean profile of a local block with halo. Collective.

    Parameters
    ----------
    ctx : StepContext
        As for :func:`horizontal_sums`; also ``ctx.grid.nx``, ``ctx.grid.ny``.
    a : xp array
        A local block with halo.

    Returns
    -------
    xp array
        The mean over the whole domain's columns, one value per level.
    """
    g = ctx.grid
    return horizontal_sums(ctx, [a])[0] / float(g.nx * g.ny)

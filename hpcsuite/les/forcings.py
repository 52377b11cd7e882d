"""Large-scale forcings (DALES modforces): Coriolis with a geostrophic wind, large-scale subsidence,
prescribed tendencies (radiative cooling, moisture advection).

All terms are local (no communication) and read their profiles from ``ctx.profiles`` (1-D ``xp``
arrays of length nz at the cell centres ``zf``).
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import InputError
from . import fused, gpukernels
from .state import add_at, zgrid_of
from .thermo import concat

__all__ = ["Coriolis", "Subsidence", "PrescribedTendencies", "coriolis_parameter", "OMEGA"]

OMEGA = 7.292e-5     # rad/s, Earth's rotation rate


def coriolis_parameter(lat_deg: float) -> float:
    """``f = 2 Omega sin(lat)`` (1/s); BOMEX (15 N) gives 3.77e-5."""
    return 2.0 * OMEGA * math.sin(math.radians(lat_deg))


def _interior(ctx):
    g, h = ctx.grid, ctx.h
    return slice(h, h + g.nxl), slice(h, h + g.nyl), Ellipsis


class Coriolis:
    """``du/dt += f (v - vg)``, ``dv/dt -= f (u - ug)`` on the staggered grid. Local.

    ``v`` is averaged to the ``u`` points from its four neighbours and ``u`` to the ``v`` points,
    as in DALES; the Galilean shift ``ctx.galilean = (cu, cv)`` is added back to the fields.

    Parameters
    ----------
    params : dict
        ``fcor`` (1/s) or ``lat`` (degrees). The geostrophic wind is ``ctx.profiles['ug']``,
        ``['vg']`` (zero where absent).
    """

    def __init__(self, params):
        params = dict(params or {})
        if "fcor" in params:
            self.f = float(params["fcor"])
        elif "lat" in params:
            lat = float(params["lat"])
            if not -90.0 <= lat <= 90.0:
                raise InputError(f"coriolis: lat must be within [-90, 90] degrees, got {lat}")
            self.f = coriolis_parameter(lat)
        else:
            raise InputError("coriolis: give fcor (1/s) or lat (degrees)")

    def __call__(self, ctx) -> None:
        f = self.f
        if f == 0.0:
            return
        u, v = ctx.fields["u"], ctx.fields["v"]
        cu, cv = getattr(ctx, "galilean", (0.0, 0.0))
        ug = ctx.profiles.get("ug", 0.0)
        vg = ctx.profiles.get("vg", 0.0)
        I, J, E = _interior(ctx)
        tu, tv = ctx.tend["u"], ctx.tend["v"]
        if fused.on_cpu() and all(isinstance(a, np.ndarray) for a in (u, v, tu, tv)):
            nz = u.shape[2]                                   # the same operations in one pass
            fused.coriolis(u, v, tu, tv, ctx.h, ctx.grid.nxl, ctx.grid.nyl, f, cu, cv,
                           np.broadcast_to(np.asarray(ug, dtype=np.float64), (nz,)),
                           np.broadcast_to(np.asarray(vg, dtype=np.float64), (nz,)))
            return
        if gpukernels.usable(u, v, tu, tv, ug, vg) and ug.shape == vg.shape == (u.shape[2],):
            gpukernels.coriolis(u, v, tu, tv, ctx.h, ctx.grid.nxl, ctx.grid.nyl, f, cu, cv, ug, vg)
            return
        im = slice(I.start - 1, I.stop - 1)
        jp, jm = slice(J.start + 1, J.stop + 1), slice(J.start - 1, J.stop - 1)
        ip = slice(I.start + 1, I.stop + 1)
        v_at_u = 0.25 * (v[I, J, E] + v[I, jp, E] + v[im, J, E] + v[im, jp, E]) + cv
        u_at_v = 0.25 * (u[I, J, E] + u[ip, J, E] + u[I, jm, E] + u[ip, jm, E]) + cu
        ctx.tend["u"][I, J, E] += f * (v_at_u - vg)
        ctx.tend["v"][I, J, E] -= f * (u_at_v - ug)


class Subsidence:
    """Large-scale vertical advection ``-w_ls ds/dz`` of the scalars, first-order upwind. Local.

    With subsidence (``w_ls < 0``) the gradient comes from the level above, with ascent from the
    level below (DALES modsubsidence); no gradient beyond the walls. ``w_ls`` is
    ``ctx.profiles['wfls']`` at ``zf``.

    Parameters
    ----------
    names : sequence of str, optional
        Fields to advect (default ``('thl', 'qt')``, those of them present, plus any ``sv*``);
        DALES leaves the momentum alone unless asked (``lmomsubs``): add ``'u', 'v'`` for that.
    """

    def __init__(self, names=None):
        self.names = None if names is None else tuple(names)

    def __call__(self, ctx) -> None:
        xp = ctx.xp
        wls = ctx.profiles.get("wfls")
        if wls is None:
            return
        zg = zgrid_of(ctx)
        names = self.names or tuple(n for n in ctx.fields if n in ("thl", "qt") or n.startswith("sv"))
        names = [n for n in names if n in ctx.fields and n in ctx.tend]
        I, J, E = _interior(ctx)
        g = ctx.grid
        together = [n for n in names if gpukernels.usable(ctx.fields[n], ctx.tend[n], wls, zg.dzh)
                    and wls.shape == (g.nz,) and ctx.fields[n].shape == ctx.tend[n].shape]
        if len(together) < 2 or len({ctx.fields[n].shape for n in together}) > 1:
            together = []
        if together:                             # (CUDA: every such field in one launch)
            gpukernels.subsidence_many([ctx.fields[n] for n in together], [ctx.tend[n] for n in together],
                                       ctx.h, g.nxl, g.nyl, wls, zg.dzh)
        for name in names:
            if name in together:
                continue
            if fused.on_cpu() and all(isinstance(a, np.ndarray) for a in (ctx.fields[name], ctx.tend[name], wls)):
                # the same operations in one pass
                fused.subsidence(ctx.fields[name], ctx.tend[name], ctx.h, ctx.grid.nxl, ctx.grid.nyl, wls, zg.dzh)
                continue
            if gpukernels.usable(ctx.fields[name], ctx.tend[name], wls, zg.dzh) and wls.shape == (ctx.grid.nz,):
                gpukernels.subsidence(ctx.fields[name], ctx.tend[name], ctx.h, ctx.grid.nxl, ctx.grid.nyl, wls, zg.dzh)
                continue
            s = ctx.fields[name][I, J, E]
            zero = xp.zeros_like(s[..., :1])
            grad = (s[..., 1:] - s[..., :-1]) / zg.dzh[1:-1]           # on the inner faces
            up = concat(xp)([grad, zero], axis=-1)                   # face above each cell
            down = concat(xp)([zero, grad], axis=-1)                 # face below each cell
            ctx.tend[name][I, J, E] -= xp.where(wls < 0, wls * up, wls * down)


class PrescribedTendencies:
    """Prescribed tendencies from ``ctx.profiles``: ``dthlrad`` on ``thl`` (K/s) and ``dqtdt`` on
    ``qt`` ((kg/kg)/s). Local. Missing profiles or fields are skipped."""

    PAIRS = (("thl", "dthlrad"), ("qt", "dqtdt"))

    def __call__(self, ctx) -> None:
        I, J, E = _interior(ctx)
        pairs = [(name, ctx.profiles[key]) for name, key in self.PAIRS
                 if ctx.profiles.get(key) is not None and name in ctx.tend]
        nz = ctx.grid.nz
        if len(pairs) >= 2 and all(gpukernels.usable(ctx.tend[n], p) and p.shape == (nz,)
                                   and ctx.tend[n].shape == ctx.tend[pairs[0][0]].shape for n, p in pairs):
            g = ctx.grid                         # (CUDA: both in one launch, the same additions)
            gpukernels.add_profiles_many([ctx.tend[n] for n, _ in pairs], [p for _, p in pairs], ctx.h, g.nxl, g.nyl)
            return
        for name, prof in pairs:
            add_at(ctx.tend[name], (I, J, E), prof)

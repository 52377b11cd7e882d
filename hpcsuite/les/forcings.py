"""Large-scale forcings (DALES modforces): Coriolis with a geostrophic wind, large-scale subsidence,
prescribed tendencies (radiative cooling, moisture advection).

All terms are local (no communication) and read their profiles from ``ctx.profiles`` (1-D ``xp``
arrays of length nz at the cell centres ``zf``). The operators they call (with their array-API
reference and the kernels registered for them) are in :mod:`hpcsuite.les.ops.forcings`.
"""
from __future__ import annotations

import math

from ..runtime import InputError
from .ops import forcings as ops
from .state import zgrid_of

__all__ = ["Coriolis", "Subsidence", "PrescribedTendencies", "coriolis_parameter", "OMEGA"]

OMEGA = 7.292e-5     # rad/s, Earth's rotation rate


def coriolis_parameter(lat_deg: float) -> float:
    """``f = 2 Omega sin(lat)`` (1/s); BOMEX (15 N) gives 3.77e-5."""
    return 2.0 * OMEGA * math.sin(math.radians(lat_deg))


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
        cu, cv = getattr(ctx, "galilean", (0.0, 0.0))
        g = ctx.grid
        ops.coriolis(ctx.fields["u"], ctx.fields["v"], ctx.tend["u"], ctx.tend["v"], ctx.h, g.nxl, g.nyl, f, cu, cv,
                     ctx.profiles.get("ug", 0.0), ctx.profiles.get("vg", 0.0))


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
        wls = ctx.profiles.get("wfls")
        if wls is None:
            return
        zg = zgrid_of(ctx)
        names = self.names or tuple(n for n in ctx.fields if n in ("thl", "qt") or n.startswith("sv"))
        names = [n for n in names if n in ctx.fields and n in ctx.tend]
        g = ctx.grid
        ops.subsidence_many(ctx.xp, [ctx.fields[n] for n in names], [ctx.tend[n] for n in names], ctx.h, g.nxl,
                            g.nyl, wls, zg.dzh)


class PrescribedTendencies:
    """Prescribed tendencies from ``ctx.profiles``: ``dthlrad`` on ``thl`` (K/s) and ``dqtdt`` on
    ``qt`` ((kg/kg)/s). Local. Missing profiles or fields are skipped."""

    PAIRS = (("thl", "dthlrad"), ("qt", "dqtdt"))

    def __call__(self, ctx) -> None:
        pairs = [(name, ctx.profiles[key]) for name, key in self.PAIRS
                 if ctx.profiles.get(key) is not None and name in ctx.tend]
        g = ctx.grid
        ops.add_profiles_many([ctx.tend[n] for n, _ in pairs], [p for _, p in pairs], ctx.h, g.nxl, g.nyl)

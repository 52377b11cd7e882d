"""Large-scale forcings (DALES modforces): Coriolis with a geostrophic wind, large-scale subsidence,
prescribed tendencies (radiative cooling, moisture advection); and the sponge layer near the domain
top (DALES modboundary's gravity-wave damping).

All terms are local (no communication) and read their profiles from ``ctx.profiles`` (1-D ``xp``
arrays of length nz at the cell centres ``zf``). The operators they call (with their array-API
reference and the kernels registered for them) are in :mod:`hpcsuite.les.ops.forcings`.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import InputError
from .horizontal import horizontal_sums
from .ops import forcings as ops
from .state import zgrid_of

__all__ = ["Coriolis", "Subsidence", "PrescribedTendencies", "Sponge", "sponge_rates", "coriolis_parameter",
           "OMEGA", "SPONGE_RATE"]

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


#: DALES's ``rnu0``: the sponge's damping rate at the top (1/s; a time scale of about 6 minutes)
SPONGE_RATE = 2.75e-3


def sponge_rates(z, base: float, top: float, rate: float):
    """The sponge's damping rate at the heights ``z`` (NumPy): ``rate sin^2(pi/2 (z - base) / (top -
    base))`` above ``base``, ``rate`` above ``top``, zero at and below ``base`` (DALES's ``tsc`` with
    ``zspb = base`` and ``zspt = top``). Local.

    Examples
    --------
    >>> sponge_rates(np.array([0.0, 1000.0, 1500.0, 2000.0, 2100.0]), 1000.0, 2000.0, 1e-3)
    array([0.    , 0.    , 0.0005, 0.001 , 0.001 ])
    """
    x = np.minimum((np.asarray(z, dtype=np.float64) - base) / (top - base), 1.0)
    return np.where(x > 0.0, rate * np.sin(0.5 * np.pi * x) ** 2, 0.0)


def _capturing(xp) -> bool:
    """Whether ``xp``'s current stream (CuPy) is being captured into a CUDA graph (les.graphs);
    False for an array module without streams, True when the stream cannot say. Local."""
    current = getattr(getattr(xp, "cuda", None), "get_current_stream", None)
    if current is None:
        return False
    try:
        return bool(current().is_capturing())
    except Exception:  # noqa: BLE001 - no answer: take it as capturing (the caller then keeps nothing)
        return True


class Sponge:
    """The sponge layer near the domain top (DALES modboundary's ``grwdamp``). Collective.

    Above the height ``base`` every field is relaxed towards a profile, ``ds/dt -= r(z) (s -
    target)``, with the rate ``r`` of :func:`sponge_rates` rising from 0 at ``base`` to ``rate`` at
    the highest cell centre ``zf[-1]`` (DALES: ``tsc``, from ``zf(ksp)`` to ``zf(kmax)``, ``rnu0``).
    The targets are the slab means for ``thl`` and ``qt`` (and the ``u``, ``v`` of ``wind = "mean"``,
    DALES ``igrw_damp = 1, 3``; ``"geostrophic"``: ``ug``, ``vg`` in the moving frame, ``igrw_damp =
    2``), zero for ``w`` (at its own half levels; DALES takes the full levels' rates there). DALES
    leaves ``e12`` alone, and so does this. The slab means of all fields travel in one
    ``Allreduce`` (on one rank they stay on the device); the relaxation is the operator
    ``les.ops.forcings.sponge`` (docs/les_operators.md).

    Parameters
    ----------
    base : float
        Height of the sponge's base (m), below the highest cell centre.
    rate : float
        The damping rate at the top (1/s, > 0); DALES's default :data:`SPONGE_RATE`.
    grid : Grid
        The global grid (its ``zf``, ``zh``).
    wind : {"mean", "geostrophic"}
        What ``u`` and ``v`` are relaxed to.

    Raises
    ------
    InputError
        A rate that is not positive, a base at or above the highest cell centre, an unknown ``wind``.
    """

    FIELDS = ("u", "v", "thl", "qt")

    def __init__(self, base: float, rate: float, grid, wind: str = "mean"):
        self.base, self.rate, self.wind = float(base), float(rate), wind
        self.top = float(grid.zf[-1])
        if not self.rate > 0.0:
            raise InputError(f"sponge: rate must be > 0 (1/s), got {rate}")
        if not self.base < self.top:
            raise InputError(f"sponge: base = {base} m must lie below the highest cell centre "
                             f"zf = {self.top:g} m")
        if wind not in ("mean", "geostrophic"):
            raise InputError(f"sponge: wind must be 'mean' or 'geostrophic', got {wind!r}")
        # the first damped level of the full (zf) and half (zh, w) levels
        self.kf = int(np.count_nonzero(np.asarray(grid.zf) <= self.base))
        self.kh = int(np.count_nonzero(np.asarray(grid.zh) <= self.base))
        # (zgrid, xp, rates at zf, rates at zh, zeros at zh): see _profiles
        self._cache = None

    def _rates(self, xp, z):
        x = (z - self.base) / (self.top - self.base)
        x = xp.minimum(x, xp.ones_like(x))
        return self.rate * xp.sin((0.5 * math.pi) * x) ** 2

    def _profiles(self, xp, zg):
        """``(rates at zf[kf:], rates at zh[kh:], zeros at zh[kh:])`` on ``xp``, made on the device
        from the vertical grid ``zg`` (``ctx.zgrid``; nothing copied from the host, which a CUDA
        graph's capture refuses) and kept for the next calls with the same ``zg`` and ``xp``: made
        on every call they were 17 elementwise operations (launches on a GPU), ~10 us a call with
        NumPy. The callers only read them. Local."""
        c = self._cache
        if c is not None and c[0] is zg and c[1] is xp:    # (references held: no reused id)
            return c[2:]
        rh = self._rates(xp, zg.zh[self.kh:])
        out = (self._rates(xp, zg.zf[self.kf:]), rh, xp.zeros_like(rh))
        # Model steps its first step without the graph (les.model: the warm-up), so the profiles
        # are normally made and kept there. Made during a capture (a new zgrid, or a Sponge called
        # first in a graph) they hold nothing until the graph runs, and nothing at all if the
        # capture fails and the model steps without graphs: then use them, but do not keep them.
        if not _capturing(xp):
            self._cache = (zg, xp, *out)
        return out

    def __call__(self, ctx) -> None:
        xp, g, f = ctx.xp, ctx.grid, ctx.fields
        zg = zgrid_of(ctx)
        kf = self.kf
        names = [n for n in self.FIELDS if n in f and n in ctx.tend]
        means = [n for n in names if self.wind == "mean" or n not in ("u", "v")]
        targets = {}
        if means:
            sums = horizontal_sums(ctx, [f[n][..., kf:] for n in means])
            targets = {n: s / float(g.nx * g.ny) for n, s in zip(means, sums)}
        if self.wind == "geostrophic":
            cu, cv = getattr(ctx, "galilean", (0.0, 0.0))
            for n, key, c in (("u", "ug", cu), ("v", "vg", cv)):
                if n in names:
                    geo = (getattr(ctx, "profiles", None) or {}).get(key)
                    targets[n] = (geo[kf:] - c) if geo is not None else xp.zeros_like(zg.zf[kf:]) - c
        rf, rh, zero = self._profiles(xp, zg)
        for n in names:
            ops.sponge(f[n], ctx.tend[n], ctx.h, g.nxl, g.nyl, rf, targets[n])
        if "w" in f and "w" in ctx.tend:
            ops.sponge(f["w"], ctx.tend["w"], ctx.h, g.nxl, g.nyl, rh, zero)

"""Moist thermodynamics: base state, saturation adjustment, virtual temperature, buoyancy.

The prognostic moist variables are the liquid-water potential temperature ``thl`` and the total
water specific humidity ``qt`` (DALES). Saturation adjustment finds the liquid water ``ql`` and the
temperature ``T`` with

    T = exnf * thl + (Lv / cp) * ql,      ql = max(qt - qsat(T, p), 0),

``qsat`` from Bolton's (1980) saturation vapour pressure over liquid water. It is solved by a fixed
number of vectorised Newton steps (no data-dependent control flow, so it runs unchanged on CuPy).

Buoyancy (Boussinesq, reference potential temperature ``th0``) is ``g (thv - <thv>) / th0`` with the
horizontal mean ``<thv>`` of this substep, interpolated linearly to the ``w`` levels.

The operators (``saturation_adjust``, ``virtual_theta`` and the one-pass ``moist_state`` and
``buoyancy`` with their numba and CUDA kernels) are in :mod:`hpcsuite.les.ops.thermo`; this module
holds the terms and the base state, and re-exports the functions by name.

Examples
--------
>>> import numpy as np
>>> ql, T = saturation_adjust(np, np.array([298.7]), np.array([0.020]), np.array([95000.0]),
...                           np.array([0.9854]))
>>> bool(ql[0] > 0)
True
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..runtime import InputError
from ..runtime.device import concat, to_host
from .constants import CP, EP, GRAV, LV, P0, RD, RV      # (RD ... EP also by name from here)
from .horizontal import horizontal_mean
from .ops import thermo as ops
from .ops.thermo import NEWTON_STEPS, esat, qsat, saturation_adjust, virtual_theta
from .state import zgrid_of

__all__ = ["RD", "RV", "CP", "LV", "GRAV", "P0", "EP", "esat", "qsat", "saturation_adjust",
           "virtual_theta", "base_state", "add_buoyancy", "Thermo", "DryThermo", "concat"]

_NEWTON = NEWTON_STEPS        # Newton steps of the saturation adjustment


def base_state(grid, ps: float, th0: float, thl0, qt0, xp=np, device=None):
    """The hydrostatic reference state of the initial profiles. Local (no communication).

    Integrates ``d(exner)/dz = -g / (cp thv)`` upwards from the surface pressure ``ps`` with the
    virtual potential temperature of the initial profiles (``thl0``, ``qt0`` at ``grid.zf``,
    condensate from the saturation adjustment, two passes), exact for ``thv`` constant in each cell.

    Parameters
    ----------
    grid : Grid
        The grid (``zf``, ``zh``, ``dzf``).
    ps : float
        Surface pressure (Pa).
    th0 : float
        Reference potential temperature of the Boussinesq buoyancy (K).
    thl0, qt0 : array_like (nz)
        Initial profiles (host arrays); ``qt0`` may be zeros (dry).
    xp : module
        Array namespace of the returned arrays.
    device : optional
        Device of the returned arrays (only for array_api_strict's non-default device).

    Returns
    -------
    SimpleNamespace
        ``presf, presh, exnf, exnh, thvref`` (xp arrays; nz or nz+1), ``rhof`` (nz, kg/m^3),
        ``th0``, ``ps``.
    """
    thl0 = np.asarray(to_host(thl0), dtype=np.float64)
    qt0 = np.asarray(to_host(qt0), dtype=np.float64)
    nz = grid.nz
    if thl0.shape != (nz,) or qt0.shape != (nz,):
        raise InputError(f"base_state: thl0 and qt0 must have {nz} levels, got {thl0.shape} and {qt0.shape}")
    if not (ps > 0 and th0 > 0):
        raise InputError(f"base_state: ps and th0 must be > 0, got ps={ps!r}, th0={th0!r}")
    zf, zh, dzf = (np.asarray(a, dtype=np.float64) for a in (grid.zf, grid.zh, grid.dzf))
    kappa = RD / CP
    ql, exnf = np.zeros(nz), np.full(nz, (ps / P0) ** kappa)
    for _ in range(2):                # the second pass includes the condensate of the first
        thv = virtual_theta(thl0, qt0, ql, exnf)
        exnh = np.empty(nz + 1)
        exnh[0] = (ps / P0) ** kappa
        exnh[1:] = exnh[0] - np.cumsum(GRAV * dzf / (CP * thv))
        exnf = exnh[:-1] - GRAV * (zf - zh[:-1]) / (CP * thv)
        presf = P0 * exnf ** (1.0 / kappa)
        ql, _T = saturation_adjust(np, thl0, qt0, presf, exnf)
    thv = virtual_theta(thl0, qt0, ql, exnf)
    presh = P0 * exnh ** (1.0 / kappa)
    rhof = presf / (RD * exnf * thv)
    put = (lambda a: _put(xp, a, device))
    return SimpleNamespace(presf=put(presf), presh=put(presh), exnf=put(exnf), exnh=put(exnh),
                           thvref=put(thv), rhof=put(rhof), th0=float(th0), ps=float(ps))


def _put(xp, host, device=None):
    """A host array on ``xp``'s device (``device`` only for array_api_strict's non-default one)."""
    host = np.ascontiguousarray(host, dtype=np.float64)
    return xp.asarray(host) if device is None else xp.asarray(host, device=device)


def add_buoyancy(ctx, thv, thvref) -> None:
    """Add ``g (thv - thvref) / th0``, interpolated to the inner ``w`` levels, to ``tend['w']``.
    Local. The interpolation weights are DALES' (linear in z on a stretched grid)."""
    zg = zgrid_of(ctx)
    ops.buoyancy(thv, thvref, zg.dzf, zg.dzh, ctx.tend["w"], GRAV / ctx.base.th0)


class Thermo:
    """Moist thermodynamics term. Collective (the horizontal mean of ``thv``).

    Writes ``diag['ql']``, ``diag['T']``, ``diag['thv']`` (cell arrays, halos included since the
    fields' halos are valid), ``diag['thvref']`` (nz) and adds the buoyancy to ``tend['w']``.
    Needs ``ctx.base.presf``, ``ctx.base.exnf``, ``ctx.base.th0`` (from :func:`base_state`).

    Parameters
    ----------
    params : dict, optional
        ``{'buoyancy': bool}`` (default True): whether to add the buoyancy term.
    """

    def __init__(self, params=None):
        params = dict(params or {})
        self.buoyancy = bool(params.get("buoyancy", True))

    def __call__(self, ctx) -> None:
        xp, f = ctx.xp, ctx.fields
        thl, qt, presf, exnf = f["thl"], f["qt"], ctx.base.presf, ctx.base.exnf
        ql, T, thv = ops.moist_state(xp, thl, qt, presf, exnf)
        _finish(ctx, ql, T, thv, self.buoyancy)


class DryThermo:
    """Dry thermodynamics term: ``thv = thl``, ``ql = 0``. Collective (horizontal mean of ``thv``).

    Without ``ctx.base.exnf`` the temperature diagnostic is ``thl`` itself.
    """

    def __init__(self, params=None):
        params = dict(params or {})
        self.buoyancy = bool(params.get("buoyancy", True))

    def __call__(self, ctx) -> None:
        xp, thl = ctx.xp, ctx.fields["thl"]
        exnf = getattr(ctx.base, "exnf", None)
        T = thl * exnf if exnf is not None else thl
        _finish(ctx, xp.zeros_like(thl), T, thl, self.buoyancy)


def _finish(ctx, ql, T, thv, buoyancy: bool) -> None:
    thvref = horizontal_mean(ctx, thv)
    ctx.diag.update(ql=ql, T=T, thv=thv, thvref=thvref)
    if buoyancy:
        add_buoyancy(ctx, thv, thvref)

"""Moist thermodynamics: base state, saturation adjustment, virtual temperature, buoyancy.

The prognostic moist variables are the liquid-water potential temperature ``thl`` and the total
water specific humidity ``qt`` (DALES). Saturation adjustment finds the liquid water ``ql`` and the
temperature ``T`` with

    T = exnf * thl + (Lv / cp) * ql,      ql = max(qt - qsat(T, p), 0),

``qsat`` from Bolton's (1980) saturation vapour pressure over liquid water. It is solved by a fixed
number of vectorised Newton steps (no data-dependent control flow, so it runs unchanged on CuPy).

Buoyancy (Boussinesq, reference potential temperature ``th0``) is ``g (thv - <thv>) / th0`` with the
horizontal mean ``<thv>`` of this substep, interpolated linearly to the ``w`` levels.

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
from ..runtime.device import to_host
from . import fused, gpukernels
from .constants import CP, EP, EP2, GRAV, LV, P0, RD, RV      # (RD ... EP also by name from here)
from .horizontal import horizontal_mean
from .state import add_at, zgrid_of

__all__ = ["RD", "RV", "CP", "LV", "GRAV", "P0", "EP", "esat", "qsat", "saturation_adjust",
           "virtual_theta", "base_state", "add_buoyancy", "Thermo", "DryThermo"]

_NEWTON = 8        # Newton steps of the saturation adjustment (to rounding even for ql ~ 10 g/kg)


def esat(xp, T):
    """Saturation vapour pressure over liquid water (Pa), Bolton (1980). Local, elementwise."""
    return 611.2 * xp.exp(17.67 * (T - 273.15) / (T - 29.65))


def qsat(xp, T, p):
    """Saturation specific humidity (kg/kg) at temperature ``T`` (K) and pressure ``p`` (Pa). Local."""
    es = esat(xp, T)
    return EP * es / (p - (1.0 - EP) * es)


def _qsat_and_slope(xp, T, p):
    es = esat(xp, T)
    des = es * (17.67 * (273.15 - 29.65)) / (T - 29.65) ** 2
    den = p - (1.0 - EP) * es
    return EP * es / den, EP * p * des / den ** 2


def saturation_adjust(xp, thl, qt, p, exn, niter: int = _NEWTON):
    """Liquid water and temperature from ``(thl, qt)`` at pressure ``p`` and Exner ``exn``. Local.

    Parameters
    ----------
    xp : module
        Array namespace.
    thl, qt : array
        Liquid-water potential temperature (K) and total water (kg/kg); any shape whose last axis
        is the vertical when ``p`` and ``exn`` are 1-D profiles (they broadcast from the right).
    p, exn : array or float
        Pressure (Pa) and Exner function at the same points.
    niter : int
        Newton steps (the default converges to rounding for atmospheric states).

    Returns
    -------
    ql, T : array
        Liquid water (kg/kg, exactly 0 where unsaturated) and temperature (K).
    """
    tl = exn * thl                                    # the temperature without condensation
    c = LV / CP
    qs_l = qsat(xp, tl, p)
    sat = qt > qs_l                                   # qsat grows with T: unsaturated at tl -> dry
    if _on_host(xp) and getattr(sat, "ndim", 0) > 0:
        # NumPy: iterate on the saturated points only (a few per cent of an LES domain); on a GPU
        # the full-array form below avoids the device synchronisation of a boolean selection
        shape = sat.shape
        pick = (lambda a: np.broadcast_to(a, shape)[sat])
        tl_s, qt_s, p_s = pick(tl), pick(qt), pick(p)
        T_s = _newton(xp, tl_s, qt_s, p_s, c, niter)
        ql = np.zeros(shape, dtype=np.result_type(tl, qt))
        ql[sat] = np.maximum(qt_s - qsat(xp, T_s, p_s), 0.0)
        return ql, tl + c * ql
    T = _newton(xp, tl, qt, p, c, niter)
    ql = xp.where(sat, xp.maximum(qt - qsat(xp, T, p), 0.0), 0.0)
    return ql, tl + c * ql


def _newton(xp, tl, qt, p, c, niter):
    """Solve ``T - tl - c (qt - qsat(T, p)) = 0`` from ``T = tl`` (converges from the left)."""
    T = tl
    for _ in range(niter):
        qs, dqs = _qsat_and_slope(xp, T, p)
        T = T - (T - tl - c * (qt - qs)) / (1.0 + c * dqs)
    return T


def _on_host(xp) -> bool:
    return getattr(xp, "__name__", "") in ("numpy", "array_api_compat.numpy")


def virtual_theta(thl, qt, ql, exn):
    """Virtual potential temperature ``th (1 + 0.608 qt - 1.608 ql)``, ``th = thl + Lv ql/(cp exn)``.
    Local, elementwise."""
    th = thl + (LV / CP) * ql / exn
    return th * (1.0 + EP2 * qt - (RV / RD) * ql)


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


def concat(xp):
    """The array-API ``concat`` (NumPy 2, array_api_strict) or ``concatenate`` (CuPy)."""
    return getattr(xp, "concat", None) or xp.concatenate


def add_buoyancy(ctx, thv, thvref) -> None:
    """Add ``g (thv - thvref) / th0``, interpolated to the inner ``w`` levels, to ``tend['w']``.
    Local. The interpolation weights are DALES' (linear in z on a stretched grid)."""
    zg = zgrid_of(ctx)
    tw = ctx.tend["w"]
    if isinstance(ctx.base.th0, float) and tw.shape[:-1] == thv.shape[:-1] \
            and gpukernels.usable(thv, thvref, zg.dzf, zg.dzh, tw):     # the same operations in one pass
        gpukernels.buoyancy(thv, thvref, zg.dzf, zg.dzh, tw, GRAV / ctx.base.th0)
        return
    if isinstance(ctx.base.th0, float) and tw.shape[:-1] == thv.shape[:-1] and thv.ndim == 3 \
            and fused.on_cpu() and all(isinstance(a, np.ndarray) for a in (thv, thvref, zg.dzf, zg.dzh, tw)) \
            and thvref.shape == thv.shape[-1:]:
        fused.buoyancy(thv, thvref, zg.dzf, zg.dzh, tw, GRAV / ctx.base.th0)      # (numba, one pass)
        return
    b = (GRAV / ctx.base.th0) * (thv - thvref)
    dzf, dzh = zg.dzf, zg.dzh
    bh = (b[..., 1:] * dzf[:-1] + b[..., :-1] * dzf[1:]) / (2.0 * dzh[1:-1])
    add_at(tw, (..., slice(1, -1)), bh)


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
        if gpukernels.usable(thl, qt, presf, exnf) and presf.shape == exnf.shape == thl.shape[-1:]:
            ql, T, thv = gpukernels.thermo(xp, thl, qt, presf, exnf, _NEWTON)     # one pass
        elif fused.on_cpu() and all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in (thl, qt, presf, exnf)) \
                and thl.ndim == 3 and qt.shape == thl.shape and presf.shape == exnf.shape == thl.shape[-1:]:
            ql, T, thv = _moist_state_fused(thl, qt, presf, exnf)
        else:
            ql, T = saturation_adjust(xp, thl, qt, presf, exnf)
            thv = virtual_theta(thl, qt, ql, exnf)
        _finish(ctx, ql, T, thv, self.buoyancy)


def _moist_state_fused(thl, qt, p, exn, niter: int = _NEWTON):
    """``(ql, T, thv)`` of :func:`saturation_adjust` and :func:`virtual_theta` on NumPy blocks with
    the numba kernels for the full-array arithmetic: the same operations in the same order and
    NumPy's own ``exp``, so bit-identical to them; the saturated points as in the source."""
    shape = thl.shape
    tl, x = fused.sat_prepare(thl, exn)
    np.exp(x, out=x)
    sat = fused.sat_mask(x, p, qt, EP, 1.0 - EP)
    pick = (lambda a: np.broadcast_to(a, shape)[sat])
    tl_s, qt_s, p_s = pick(tl), pick(qt), pick(p)
    c = LV / CP
    T_s = _newton(np, tl_s, qt_s, p_s, c, niter)
    ql = np.zeros(shape)
    ql[sat] = np.maximum(qt_s - qsat(np, T_s, p_s), 0.0)
    T, thv = fused.sat_finish(thl, qt, ql, tl, exn, c, EP2, RV / RD)
    return ql, T, thv


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

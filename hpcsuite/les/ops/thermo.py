"""Moist thermodynamics operators: the saturation adjustment with the virtual potential temperature
(``moist_state``) and the buoyancy on the ``w`` levels (``buoyancy``).

The reference is the array-API source below (Bolton's saturation vapour pressure, a fixed number of
vectorised Newton steps); ``les.fused`` (numba arithmetic around NumPy's own ``exp``: bit-identical)
and ``les.gpukernels`` (one CUDA thread per cell: the GPU's ``exp`` differs in the last bits) are
registered for it. All functions here are local.
"""
from __future__ import annotations

import numpy as np
from array_api_compat import is_numpy_namespace

from .. import fused, gpukernels
from ..constants import CP, EP, EP2, GRAV, LV, RD, RV
from .common import cuda_arrays, numba_arrays, random
from .registry import Operator

__all__ = ["NEWTON_STEPS", "esat", "qsat", "saturation_adjust", "virtual_theta", "moist_state", "buoyancy"]

#: Newton steps of the saturation adjustment (to rounding even for ql ~ 10 g/kg)
NEWTON_STEPS = 8


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


def saturation_adjust(xp, thl, qt, p, exn, niter: int = NEWTON_STEPS):
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
    if is_numpy_namespace(xp) and getattr(sat, "ndim", 0) > 0:
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


def virtual_theta(thl, qt, ql, exn):
    """Virtual potential temperature ``th (1 + 0.608 qt - 1.608 ql)``, ``th = thl + Lv ql/(cp exn)``.
    Local, elementwise."""
    th = thl + (LV / CP) * ql / exn
    return th * (1.0 + EP2 * qt - (RV / RD) * ql)


# ---------------------------------------------------------------------------------------------
# moist_state(xp, thl, qt, presf, exnf) -> (ql, T, thv)
def _moist_state_reference(xp, thl, qt, presf, exnf):
    ql, T = saturation_adjust(xp, thl, qt, presf, exnf)
    return ql, T, virtual_theta(thl, qt, ql, exnf)


def _moist_state_numba(xp, thl, qt, p, exn, niter: int = NEWTON_STEPS):
    """The reference on NumPy blocks with the numba kernels for the full-array arithmetic: the same
    operations in the same order and NumPy's own ``exp``, so bit-identical; the saturated points as
    in the source."""
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


def _profiles_fit(thl, qt, presf, exnf) -> bool:
    return thl.ndim == 3 and qt.shape == thl.shape and presf.shape == exnf.shape == thl.shape[-1:]


def _moist_state_example(case, rng):
    """A cloudy block: about half of the cells saturated."""
    nz = case.grid.nz
    shape = case.fields["thl"].shape
    z = np.linspace(0.0, 1.0, nz)
    thl = case.xp.asarray(297.0 + 8.0 * z + rng.uniform(-1.5, 1.5, shape))
    qt = case.xp.asarray(0.017 - 0.012 * z + rng.uniform(-0.004, 0.004, shape))
    return (case.xp, thl, qt, case.base.presf, case.base.exnf), {}


moist_state = Operator("moist_state", _moist_state_reference, example=_moist_state_example)
moist_state.__doc__ = """``(ql, T, thv)``: :func:`saturation_adjust` and :func:`virtual_theta` of ``thl``,
``qt`` (blocks whose last axis is the vertical) at the profiles ``presf``, ``exnf``. Local."""
moist_state.register("numba", _moist_state_numba,
                     lambda xp, thl, qt, p, e: numba_arrays(thl, qt, p, e) and _profiles_fit(thl, qt, p, e)
                     and all(a.dtype == np.float64 for a in (thl, qt, p, e)))
moist_state.register("cuda", lambda xp, thl, qt, p, e: gpukernels.thermo(xp, thl, qt, p, e, NEWTON_STEPS),
                     lambda xp, thl, qt, p, e: cuda_arrays(thl, qt, p, e) and p.shape == e.shape == thl.shape[-1:],
                     tolerance=1e-12)       # (the GPU's exp differs from NumPy's in the last bits)


# ---------------------------------------------------------------------------------------------
# buoyancy(thv, thvref, dzf, dzh, tw, c): tw[..., 1:-1] += c (thv - thvref) on the w levels
def _buoyancy_reference(thv, thvref, dzf, dzh, tw, c) -> None:
    b = c * (thv - thvref)
    bh = (b[..., 1:] * dzf[:-1] + b[..., :-1] * dzf[1:]) / (2.0 * dzh[1:-1])
    view = tw[..., 1:-1]
    view += bh


def _buoyancy_check(thv, thvref, dzf, dzh, tw, c) -> None:
    if tw.shape[:-1] != thv.shape[:-1] or tw.shape[-1] != thv.shape[-1] + 1:
        raise ValueError(f"les.ops.buoyancy: tw must have thv's columns and one level more, "
                         f"got {tw.shape} and {thv.shape}")


def _buoyancy_example(case, rng):
    thl = case.fields["thl"]
    thv = random(case, rng, thl.shape, 299.0, 301.0)
    thvref = random(case, rng, (case.grid.nz,), 299.9, 300.1)
    tw = random(case, rng, case.fields["w"].shape)
    return (thv, thvref, case.zgrid.dzf, case.zgrid.dzh, tw, GRAV / 300.0), {}


buoyancy = Operator("buoyancy", _buoyancy_reference, check=_buoyancy_check, example=_buoyancy_example)
buoyancy.__doc__ = """Add ``c (thv - thvref)``, interpolated to the inner ``w`` levels with DALES' weights
(linear in z on a stretched grid), to ``tw[..., 1:-1]``. Local."""
buoyancy.register("numba", lambda *a: fused.buoyancy(*a),
                  lambda thv, thvref, dzf, dzh, tw, c: isinstance(c, float) and thv.ndim == 3
                  and numba_arrays(thv, thvref, dzf, dzh, tw) and thvref.shape == thv.shape[-1:])
buoyancy.register("cuda", lambda *a: gpukernels.buoyancy(*a),
                  lambda thv, thvref, dzf, dzh, tw, c: isinstance(c, float)
                  and cuda_arrays(thv, thvref, dzf, dzh, tw))

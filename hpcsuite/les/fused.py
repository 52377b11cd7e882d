"""Fused CPU kernels (numba) for the hottest LES operators, one pass over memory each: the
2nd/5th-order advection (one field's whole tendency; the momentum face velocities), the subgrid
closure (edge gradients, strain rate, TKE length scale and viscosities, TKE sources, face
diffusivities, scalar and momentum diffusion, optionally added straight into the tendencies), the
buoyancy, Coriolis and subsidence, the pressure projection's divergence and gradient, and the
Runge-Kutta stage update.

The array-API source of the operators in ``les.ops`` stays the reference; these kernels are
registered there as the ``"numba"`` implementations and replace it on NumPy arrays (on CuPy arrays
their CUDA counterparts in ``gpukernels`` and ``gpusubgrid`` do). They
perform the same floating-point operations in the same order (no fastmath: no reassociation, no
FMA contraction), so both paths agree bit for bit, which ``tests/les/test_ops.py`` checks for every
registered kernel and ``tests/les/test_fused.py`` for whole steps. Why numba and not more NumPy: a scalar diffusion in NumPy makes
about fifteen passes over memory with a fresh temporary each; fused it is one.

numba comes with the ``fast`` extra. Without it :data:`AVAILABLE` is false, the kernels below stay
plain Python that nothing calls, and the CPU runs the array-API source (the same results, 2-3x
slower); the CUDA kernels of ``gpukernels`` do not need numba.
"""
from __future__ import annotations

import numpy as np

from ..runtime import optional

__all__ = ["scalar_diffusion", "momentum_diffusion", "tke_sources", "face_velocities", "buoyancy", "sat_prepare", "sat_mask", "sat_finish", "horizontal_advection", "advect_into", "edges",
           "strain2", "tke_closure", "face_diffusivities", "rk_update", "coriolis", "subsidence",
           "projection_rhs", "subtract_gradient", "AVAILABLE", "on_cpu"]

#: whether numba is installed (the ``fast`` extra): the CPU kernels here need it, the GPU ones not
numba, AVAILABLE = optional.numba_module()


def on_cpu() -> bool:
    """Whether the CPU kernels here can run (numba is installed). Whether they do is the operator
    registry's choice (``les.ops.is_selected("numba")``; ``HPCSUITE_LES_FUSED=0`` or
    ``ops.select("reference")`` runs the array-API source everywhere). Local."""
    return AVAILABLE


@numba.njit(parallel=True, fastmath=False, cache=True)
def _scalar_diffusion(s, kx, ky, kz, kconst, dzf, dzh, dx2, dy2, fb, out, extra, i0, j0, ni, nj, add):  # pragma: no cover
    # the tendency at core cell (i, j, k) = block cell (i + 1, j + 1, k), for the core cells
    # i0 .. i0 + ni - 1, j0 .. j0 + nj - 1. kx, ky, kz are the face diffusivities (shapes as in
    # subgrid.ScalarDiffusion) or unused when kconst >= 0. extra (a block array, or empty) is added
    # to it; then it is stored in out[i, j, k], or with add added to out's block cell (into tend)
    nz = s.shape[2]
    for a in numba.prange(ni):
        i = i0 + a
        for b in range(nj):
            j = j0 + b
            for k in range(nz):
                c = s[i + 1, j + 1, k]
                if kconst >= 0.0:
                    fxp = kconst * (s[i + 2, j + 1, k] - c)
                    fxm = kconst * (c - s[i, j + 1, k])
                    fyp = kconst * (s[i + 1, j + 2, k] - c)
                    fym = kconst * (c - s[i + 1, j, k])
                else:
                    fxp = kx[i + 1, j, k] * (s[i + 2, j + 1, k] - c)
                    fxm = kx[i, j, k] * (c - s[i, j + 1, k])
                    fyp = ky[i, j + 1, k] * (s[i + 1, j + 2, k] - c)
                    fym = ky[i, j, k] * (c - s[i + 1, j, k])
                t = (fxp - fxm) / dx2 + (fyp - fym) / dy2
                if k + 1 < nz:
                    kk = kconst if kconst >= 0.0 else kz[i, j, k]
                    gp = kk * (s[i + 1, j + 1, k + 1] - c) / dzh[k + 1]
                else:
                    gp = 0.0
                if k > 0:
                    kk = kconst if kconst >= 0.0 else kz[i, j, k - 1]
                    gm = kk * (c - s[i + 1, j + 1, k - 1]) / dzh[k]
                else:
                    gm = -fb[i + 1, j + 1] if fb.shape[0] > 0 else 0.0
                val = t + (gp - gm) / dzf[k]
                if extra.shape[0] > 0:
                    val = val + extra[i + 1, j + 1, k]
                if add:
                    out[i + 1, j + 1, k] += val
                else:
                    out[i, j, k] = val


_EMPTY2 = np.zeros((0, 0))
_EMPTY3 = np.zeros((0, 0, 0))


def scalar_diffusion(s, kx, ky, kz, dzf, dzh, dx2: float, dy2: float, flux_bottom=None, into=None, extra=None):
    """The core-shaped tendency ``div(K grad s)`` (see ``subgrid.ScalarDiffusion``) in one pass.
    ``kx``, ``ky``, ``kz``: the face diffusivities, or one float for all. Local.

    ``into = (tend, h, nxl, nyl)``: add the tendency (plus the core of the block array ``extra``
    when given) to the interior of the block array ``tend`` instead, computing only there, and
    return None: the source's ``tend[interior] += tendency (+ extra)`` without the temporaries.
    """
    const = isinstance(kx, float)
    fb = _EMPTY2 if flux_bottom is None else np.ascontiguousarray(flux_bottom, dtype=np.float64)
    ex = _EMPTY3 if extra is None else extra
    if into is None:
        out = np.empty((s.shape[0] - 2, s.shape[1] - 2, s.shape[2]))
        i0 = j0 = 0
        ni, nj = out.shape[:2]
    else:
        out, h, ni, nj = into
        i0 = j0 = h - 1
    _scalar_diffusion(s, _EMPTY3 if const else kx, _EMPTY3 if const else ky, _EMPTY3 if const else kz,
                      float(kx) if const else -1.0, dzf, dzh, float(dx2), float(dy2), fb, out, ex,
                      i0, j0, int(ni), int(nj), into is not None)
    return out if into is None else None


@numba.njit(parallel=True, fastmath=False, cache=True)
def _face_diffusivities(K, dzf, dzh, kx, ky, kz):  # pragma: no cover - compiled
    # subgrid.ScalarDiffusion's face diffusivities, the same operations
    nx, ny, nz = K.shape
    for a in numba.prange(nx - 1):
        for b in range(ny - 2):
            for k in range(nz):
                kx[a, b, k] = 0.5 * (K[a + 1, b + 1, k] + K[a, b + 1, k])
    for a in numba.prange(nx - 2):
        for b in range(ny - 1):
            for k in range(nz):
                ky[a, b, k] = 0.5 * (K[a + 1, b + 1, k] + K[a + 1, b, k])
        for b in range(ny - 2):
            for m in range(nz - 1):
                kz[a, b, m] = (dzf[m + 1] * K[a + 1, b + 1, m] + dzf[m] * K[a + 1, b + 1, m + 1]) / (2.0 * dzh[m + 1])


def face_diffusivities(K, dzf, dzh):
    """``(kx, ky, kz)`` of ``subgrid.ScalarDiffusion`` from the block array ``K`` in one pass (shared
    by every field diffused with ``K``). Local."""
    nx, ny, nz = K.shape
    kx, ky = np.empty((nx - 1, ny - 2, nz)), np.empty((nx - 2, ny - 1, nz))
    kz = np.empty((nx - 2, ny - 2, max(nz - 1, 0)))
    _face_diffusivities(K, dzf, dzh, kx, ky, kz)
    return kx, ky, kz


@numba.njit(inline="always")
def _rim(i, j, nx, ny):  # pragma: no cover - compiled
    return i == 0 or j == 0 or i == nx - 1 or j == ny - 1


@numba.njit(inline="always")
def _tau_uv(ekm, suv, i, j, k, nx, ny):  # pragma: no cover - compiled
    if _rim(i, j, nx, ny):
        return 0.0
    return 0.25 * (ekm[i, j, k] + ekm[i - 1, j, k] + ekm[i, j - 1, k] + ekm[i - 1, j - 1, k]) * suv[i, j, k]


@numba.njit(inline="always")
def _tau_z(ekm, sz, i, j, di, dj, m, dzf, dzh, nx, ny):  # pragma: no cover - compiled
    # the uw (di = 1) or vw (dj = 1) edge stress on inner face m + 1
    if _rim(i, j, nx, ny):
        return 0.0
    a = ekm[i, j, m] + ekm[i - di, j - dj, m]
    b = ekm[i, j, m + 1] + ekm[i - di, j - dj, m + 1]
    return (dzf[m + 1] * a + dzf[m] * b) / (4.0 * dzh[m + 1]) * sz[i, j, m]


@numba.njit(parallel=True, fastmath=False, cache=True)
def _momentum_diffusion(u, v, w, ekm, suv, suw, svw, dzf, dzh, dx, dy, fuw, fvw, tu, tv, tw,
                        i0, j0, ni, nj, add):  # pragma: no cover
    # the core cells i0 .. i0 + ni - 1, j0 .. j0 + nj - 1 (block cells + 1); with add, added to the
    # tendency blocks tu, tv (block cell) and tw (block cell, inner level m + 1)
    nx, ny, nz = u.shape
    c2x, c2y = 2.0 / dx ** 2, 2.0 / dy ** 2
    for ai in numba.prange(ni):
        i = i0 + ai
        bi = i + 1
        for aj in range(nj):
            j = j0 + aj
            bj = j + 1
            for k in range(nz):
                # u: 2 ekm du/dx at centres, differenced in x (fx is zero on the rim)
                fxp = 0.0 if _rim(bi, bj, nx, ny) else ekm[bi, bj, k] * (u[bi + 1, bj, k] - u[bi, bj, k])
                fxm = 0.0 if _rim(bi - 1, bj, nx, ny) else ekm[bi - 1, bj, k] * (u[bi, bj, k] - u[bi - 1, bj, k])
                t = (fxp - fxm) * c2x
                t = t + (_tau_uv(ekm, suv, bi, bj + 1, k, nx, ny) - _tau_uv(ekm, suv, bi, bj, k, nx, ny)) / dy
                gp = _tau_z(ekm, suw, bi, bj, 1, 0, k, dzf, dzh, nx, ny) if k + 1 < nz else 0.0
                if k > 0:
                    gm = _tau_z(ekm, suw, bi, bj, 1, 0, k - 1, dzf, dzh, nx, ny)
                else:
                    gm = -fuw[bi, bj] if fuw.shape[0] > 0 else 0.0
                if add:
                    tu[bi, bj, k] += t + (gp - gm) / dzf[k]
                else:
                    tu[i, j, k] = t + (gp - gm) / dzf[k]
                # v
                fyp = 0.0 if _rim(bi, bj, nx, ny) else ekm[bi, bj, k] * (v[bi, bj + 1, k] - v[bi, bj, k])
                fym = 0.0 if _rim(bi, bj - 1, nx, ny) else ekm[bi, bj - 1, k] * (v[bi, bj, k] - v[bi, bj - 1, k])
                t = (fyp - fym) * c2y
                t = t + (_tau_uv(ekm, suv, bi + 1, bj, k, nx, ny) - _tau_uv(ekm, suv, bi, bj, k, nx, ny)) / dx
                gp = _tau_z(ekm, svw, bi, bj, 0, 1, k, dzf, dzh, nx, ny) if k + 1 < nz else 0.0
                if k > 0:
                    gm = _tau_z(ekm, svw, bi, bj, 0, 1, k - 1, dzf, dzh, nx, ny)
                else:
                    gm = -fvw[bi, bj] if fvw.shape[0] > 0 else 0.0
                if add:
                    tv[bi, bj, k] += t + (gp - gm) / dzf[k]
                else:
                    tv[i, j, k] = t + (gp - gm) / dzf[k]
            # w on the inner faces m + 1
            for m in range(nz - 1):
                t = (_tau_z(ekm, suw, bi + 1, bj, 1, 0, m, dzf, dzh, nx, ny)
                     - _tau_z(ekm, suw, bi, bj, 1, 0, m, dzf, dzh, nx, ny)) / dx \
                    + (_tau_z(ekm, svw, bi, bj + 1, 0, 1, m, dzf, dzh, nx, ny)
                       - _tau_z(ekm, svw, bi, bj, 0, 1, m, dzf, dzh, nx, ny)) / dy
                a = ekm[bi, bj, m + 1] * (w[bi, bj, m + 2] - w[bi, bj, m + 1]) / dzf[m + 1]
                b = ekm[bi, bj, m] * (w[bi, bj, m + 1] - w[bi, bj, m]) / dzf[m]
                if add:
                    tw[bi, bj, m + 1] += t + (a - b) * 2.0 / dzh[m + 1]
                else:
                    tw[i, j, m] = t + (a - b) * 2.0 / dzh[m + 1]


def momentum_diffusion(u, v, w, ekm, edges, dzf, dzh, dx: float, dy: float, flux_uw=None, flux_vw=None,
                       into=None):
    """Core-shaped tendencies ``(tu, tv, tw)`` of the subgrid stress divergence (see
    ``subgrid.momentum_diffusion``; ``tw`` on the inner faces) in one pass. Local.

    ``into = (tend_u, tend_v, tend_w, h, nxl, nyl)``: add them to the interiors of the tendency
    blocks instead (``tw`` to the inner levels of ``tend_w``), computing only there; returns None.
    """
    nx, ny, nz = u.shape
    if into is None:
        tu = np.empty((nx - 2, ny - 2, nz))
        tv = np.empty((nx - 2, ny - 2, nz))
        tw = np.empty((nx - 2, ny - 2, max(nz - 1, 0)))
        i0 = j0 = 0
        ni, nj = nx - 2, ny - 2
    else:
        tu, tv, tw, h, ni, nj = into
        i0 = j0 = h - 1
    suv, suw, svw = edges
    fuw = _EMPTY2 if flux_uw is None else np.ascontiguousarray(flux_uw, dtype=np.float64)
    fvw = _EMPTY2 if flux_vw is None else np.ascontiguousarray(flux_vw, dtype=np.float64)
    _momentum_diffusion(u, v, w, ekm, suv, suw, svw, dzf, dzh, float(dx), float(dy), fuw, fvw, tu, tv, tw,
                        i0, j0, int(ni), int(nj), into is not None)
    return (tu, tv, tw) if into is None else None


@numba.njit(parallel=True, fastmath=False, cache=True)
def _tke_sources(ekm, ekh, zlt, e12, n2, s2, delta, ce1, ce2, shear, buoy, diss, total):  # pragma: no cover
    nx, ny, nz = ekm.shape
    for i in numba.prange(nx):
        for j in range(ny):
            for k in range(nz):
                e = e12[i, j, k]
                sh = ekm[i, j, k] * (2.0 * s2[i, j, k]) / (2.0 * e)
                bu = -ekh[i, j, k] * n2[i, j, k] / (2.0 * e)
                di = -(ce1 + ce2 * zlt[i, j, k] / delta[k]) * (e * e) / (2.0 * zlt[i, j, k])
                shear[i, j, k], buoy[i, j, k], diss[i, j, k] = sh, bu, di
                total[i, j, k] = sh + bu + di


def tke_sources(ekm, ekh, zlt, e12, n2, s2, delta, ce1: float, ce2: float):
    """``(shear, buoyancy, dissipation, their sum)`` of ``subgrid.SubgridTKE.sources`` in one pass
    (block arrays of ``ekm``'s shape; ``delta`` the filter width per level). Local."""
    out = tuple(np.empty(ekm.shape) for _ in range(4))
    _tke_sources(ekm, ekh, zlt, e12, n2, s2, delta, float(ce1), float(ce2), *out)
    return out


@numba.njit(parallel=True, fastmath=False, cache=True)
def _face_w(u, v, w, wlo, whi, vx, vy, vz, h):  # pragma: no cover - compiled
    # advection.face_velocities of w: u and v at the half levels (zero at the surface and the lid)
    # on the x and y faces, w averaged to the full levels
    nxl, nyl, nz = vz.shape
    for a in numba.prange(nxl + 1):
        i = h + a
        for b in range(nyl + 1):
            j = h + b
            for k in range(nz + 1):
                inner = k >= 1 and k <= nz - 1
                if b < nyl:
                    vx[a, b, k] = wlo[k - 1] * u[i, j, k - 1] + whi[k - 1] * u[i, j, k] if inner else 0.0
                if a < nxl:
                    vy[a, b, k] = wlo[k - 1] * v[i, j, k - 1] + whi[k - 1] * v[i, j, k] if inner else 0.0
                if a < nxl and b < nyl and k < nz:
                    vz[a, b, k] = 0.5 * (w[i, j, k] + w[i, j, k + 1])


@numba.njit(inline="always")
def _pair_means(s, out, h, di, dj):  # pragma: no cover - compiled
    for a in numba.prange(out.shape[0]):
        for b in range(out.shape[1]):
            for k in range(out.shape[2]):
                out[a, b, k] = 0.5 * (s[h + a - di, h + b - dj, k] + s[h + a, h + b, k])


@numba.njit(parallel=True, fastmath=False, cache=True)
def _face_pairs(u, v, w, vx, vy, vz, h, di, dj):  # pragma: no cover - compiled
    # advection.face_velocities of u (di = 1) or v (dj = 1): each velocity averaged over the pair of
    # points around the face, one point back along the field's own direction
    _pair_means(u, vx, h, di, dj)
    _pair_means(v, vy, h, di, dj)
    _pair_means(w, vz, h, di, dj)


def face_velocities(name: str, u, v, w, h: int, nxl: int, nyl: int, wlo=None, whi=None):
    """``(Vx, Vy, Vz)`` of ``advection.face_velocities`` for momentum field ``name`` (u, v or w) in
    one pass. ``u``, ``v``, ``w``: the fields (``w`` with ``nz + 1`` levels). Local."""
    nz = int(u.shape[2])
    if name == "w":
        out = (np.empty((nxl + 1, nyl, nz + 1)), np.empty((nxl, nyl + 1, nz + 1)), np.empty((nxl, nyl, nz)))
        _face_w(u, v, w, wlo, whi, *out, int(h))
        return out
    di, dj = (1, 0) if name == "u" else (0, 1)
    out = (np.empty((nxl + 1, nyl, nz)), np.empty((nxl, nyl + 1, nz)), np.empty((nxl, nyl, nz + 1)))
    _face_pairs(u, v, w, *out, int(h), di, dj)
    return out


@numba.njit(parallel=True, fastmath=False, cache=True)
def _buoyancy(thv, thvref, dzf, dzh, tw, c):  # pragma: no cover - compiled
    nx, ny, nz = thv.shape
    for i in numba.prange(nx):
        for j in range(ny):
            for k in range(nz - 1):
                b1 = c * (thv[i, j, k + 1] - thvref[k + 1])
                b0 = c * (thv[i, j, k] - thvref[k])
                tw[i, j, k + 1] += (b1 * dzf[k] + b0 * dzf[k + 1]) / (2.0 * dzh[k + 1])


def buoyancy(thv, thvref, dzf, dzh, tw, c: float) -> None:
    """``thermo.add_buoyancy`` in one pass: ``tw[..., 1:-1] += interpolated c (thv - thvref)``;
    ``thv`` (nz levels) and ``tw`` (nz + 1) blocks of the same columns. Local."""
    _buoyancy(thv, thvref, dzf, dzh, tw, float(c))


@numba.njit(parallel=True, fastmath=False, cache=True)
def _sat_prepare(thl, exn, tl, x):  # pragma: no cover - compiled
    # thermo.saturation_adjust up to its exp: tl = exn thl and Bolton's exponent at tl
    nx, ny, nz = thl.shape
    for i in numba.prange(nx):
        for j in range(ny):
            for k in range(nz):
                t = exn[k] * thl[i, j, k]
                tl[i, j, k] = t
                x[i, j, k] = 17.67 * (t - 273.15) / (t - 29.65)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _sat_mask(e, p, qt, ep, one_minus_ep, sat):  # pragma: no cover - compiled
    # from exp(x): qsat at tl, and whether the point is saturated there
    nx, ny, nz = qt.shape
    for i in numba.prange(nx):
        for j in range(ny):
            for k in range(nz):
                es = 611.2 * e[i, j, k]
                sat[i, j, k] = qt[i, j, k] > ep * es / (p[k] - one_minus_ep * es)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _sat_finish(thl, qt, ql, tl, exn, c, ep2, rv_rd, T, thv):  # pragma: no cover - compiled
    # T = tl + c ql, and thermo.virtual_theta
    nx, ny, nz = thl.shape
    for i in numba.prange(nx):
        for j in range(ny):
            for k in range(nz):
                q = ql[i, j, k]
                T[i, j, k] = tl[i, j, k] + c * q
                th = thl[i, j, k] + c * q / exn[k]
                thv[i, j, k] = th * (1.0 + ep2 * qt[i, j, k] - rv_rd * q)


def sat_prepare(thl, exn):
    """``(tl, x)``: ``exn * thl`` and Bolton's exponent ``17.67 (tl - 273.15) / (tl - 29.65)`` of
    ``thermo.saturation_adjust``, in one pass (its ``exp`` is left to NumPy, which the source
    calls: numba's need not round the same). Local."""
    tl, x = np.empty(thl.shape), np.empty(thl.shape)
    _sat_prepare(thl, exn, tl, x)
    return tl, x


def sat_mask(e, p, qt, ep: float, one_minus_ep: float):
    """Boolean ``qt > qsat(tl, p)`` from ``e = exp(x)`` of :func:`sat_prepare`. Local."""
    sat = np.empty(qt.shape, dtype=np.bool_)
    _sat_mask(e, p, qt, float(ep), float(one_minus_ep), sat)
    return sat


def sat_finish(thl, qt, ql, tl, exn, c: float, ep2: float, rv_rd: float):
    """``(T, thv)``: ``tl + c ql`` and ``thermo.virtual_theta`` in one pass. Local."""
    T, thv = np.empty(thl.shape), np.empty(thl.shape)
    _sat_finish(thl, qt, ql, tl, exn, float(c), float(ep2), float(rv_rd), T, thv)
    return T, thv


@numba.njit(inline="always")
def _sign(v):  # pragma: no cover - compiled
    # NumPy's sign: +0.0 for both zeros (numba's np.sign keeps -0.0, which changes cen - sign * dis)
    if v > 0.0:
        return 1.0
    if v < 0.0:
        return -1.0
    return 0.0 if v == 0.0 else v


@numba.njit(inline="always")
def _face(phi, axis, f, a, k, fifth, vf):  # pragma: no cover - compiled
    # phi on face f along axis (between points f - 1 and f); a: the index along the other axis
    if axis == 0:
        pm1, p0 = phi[f - 1, a, k], phi[f, a, k]
    else:
        pm1, p0 = phi[a, f - 1, k], phi[a, f, k]
    if not fifth:
        return 0.5 * (pm1 + p0)
    if axis == 0:
        pm3, pm2, p1, p2 = phi[f - 3, a, k], phi[f - 2, a, k], phi[f + 1, a, k], phi[f + 2, a, k]
    else:
        pm3, pm2, p1, p2 = phi[a, f - 3, k], phi[a, f - 2, k], phi[a, f + 1, k], phi[a, f + 2, k]
    cen = (37.0 * (pm1 + p0) - 8.0 * (pm2 + p1) + (pm3 + p2)) / 60.0
    dis = (10.0 * (p0 - pm1) - 5.0 * (p1 - pm2) + (p2 - pm3)) / 60.0
    return cen - _sign(vf) * dis


@numba.njit(parallel=True, fastmath=False, cache=True)
def _horizontal(phi, V, axis, h, fifth, spacing, out):  # pragma: no cover - compiled
    nxl, nyl, nz = out.shape
    for i in numba.prange(nxl):
        for j in range(nyl):
            for k in range(nz):
                if axis == 0:
                    vl, vr = V[i, j, k], V[i + 1, j, k]
                    fl = vl * _face(phi, 0, h + i, h + j, k, fifth, vl)
                    fr = vr * _face(phi, 0, h + i + 1, h + j, k, fifth, vr)
                else:
                    vl, vr = V[i, j, k], V[i, j + 1, k]
                    fl = vl * _face(phi, 1, h + j, h + i, k, fifth, vl)
                    fr = vr * _face(phi, 1, h + j + 1, h + i, k, fifth, vr)
                out[i, j, k] = -(fr - fl) / spacing


def horizontal_advection(phi, V, axis: int, h: int, nxl: int, nyl: int, spacing: float, scheme: str):
    """The interior tendency ``-(F[i+1] - F[i]) / spacing`` along ``axis``, ``F = V phi_face`` with
    the 2nd- or 5th-order face value (see ``advection._horizontal``), in one pass. Local."""
    out = np.empty((nxl, nyl, phi.shape[2]))
    _horizontal(phi, V, int(axis), int(h), scheme == "5th", float(spacing), out)
    return out


@numba.njit(inline="always")
def _vertical_flux(phi, Vz, bi, bj, i, j, f, f_lo, f_hi, voff, fifth, wm, wp):  # pragma: no cover - compiled
    # V phi_face on vertical face f (between phi[..., f - 1] and phi[..., f]) of column (bi, bj);
    # zero outside the computed faces f_lo .. f_hi - 1 (the surface and the lid). The 5th-order
    # stencil drops to 3rd and 2nd order near the ends of the column, as ops.advection.runs says.
    if f < f_lo or f >= f_hi:
        return 0.0
    vf = Vz[i, j, f - voff]
    npts = phi.shape[2]
    pm1, p0 = phi[bi, bj, f - 1], phi[bi, bj, f]
    if fifth and f >= 3 and f + 2 <= npts - 1:
        pm3, pm2, p1, p2 = phi[bi, bj, f - 3], phi[bi, bj, f - 2], phi[bi, bj, f + 1], phi[bi, bj, f + 2]
        cen = (37.0 * (pm1 + p0) - 8.0 * (pm2 + p1) + (pm3 + p2)) / 60.0
        dis = (10.0 * (p0 - pm1) - 5.0 * (p1 - pm2) + (p2 - pm3)) / 60.0
        return vf * (cen - _sign(vf) * dis)
    if fifth and f >= 2 and f + 1 <= npts - 1:
        pm2, p1 = phi[bi, bj, f - 2], phi[bi, bj, f + 1]
        cen = (7.0 * (pm1 + p0) - (pm2 + p1)) / 12.0
        dis = (3.0 * (p0 - pm1) - (p1 - pm2)) / 12.0
        return vf * (cen - _sign(vf) * dis)
    if wm.shape[0] > 0:
        return vf * (wm[f - 1] * pm1 + wp[f - 1] * p0)
    return vf * (0.5 * (pm1 + p0))


@numba.njit(parallel=True, fastmath=False, cache=True)
def _advect(tend, phi, Vx, Vy, Vz, h, fifth, dx, dy, f_lo, f_hi, voff, wm, wp, rd, k_lo, k_hi, nchunks):  # pragma: no cover
    # Every face flux is computed once: the right x face of column i is the left one of i + 1
    # (carried along i within a chunk of columns; the chunks run in parallel), the right y face
    # of j the left one of j + 1, and the upper z face of k the lower one of k + 1.
    nxl, nyl, nk = Vy.shape[0], Vx.shape[1], Vx.shape[2]
    for c in numba.prange(nchunks):
        a0, a1 = c * nxl // nchunks, (c + 1) * nxl // nchunks
        fxl = np.empty((nyl, nk))                       # left x-face fluxes of the current column
        fyl = np.empty(nk)                              # left y-face fluxes of the current cell
        for j in range(nyl):
            for k in range(k_lo, k_hi):
                vl = Vx[a0, j, k]
                fxl[j, k] = vl * _face(phi, 0, h + a0, h + j, k, fifth, vl)
        for i in range(a0, a1):
            bi = h + i
            for k in range(k_lo, k_hi):
                vl = Vy[i, 0, k]
                fyl[k] = vl * _face(phi, 1, h, bi, k, fifth, vl)
            for j in range(nyl):
                bj = h + j
                fm = _vertical_flux(phi, Vz, bi, bj, i, j, k_lo, f_lo, f_hi, voff, fifth, wm, wp)
                for k in range(k_lo, k_hi):
                    vr = Vx[i + 1, j, k]
                    fr = vr * _face(phi, 0, bi + 1, bj, k, fifth, vr)
                    tx = -(fr - fxl[j, k]) / dx
                    fxl[j, k] = fr
                    vr = Vy[i, j + 1, k]
                    fr = vr * _face(phi, 1, bj + 1, bi, k, fifth, vr)
                    ty = -(fr - fyl[k]) / dy
                    fyl[k] = fr
                    fp = _vertical_flux(phi, Vz, bi, bj, i, j, k + 1, f_lo, f_hi, voff, fifth, wm, wp)
                    tz = -(fp - fm) * rd[k]
                    tend[bi, bj, k] += (tx + ty) + tz
                    fm = fp


def advect_into(tend, phi, Vx, Vy, Vz, h: int, scheme: str, dx: float, dy: float, faces, voff: int,
                weights, rd, levels):
    """``tend[interior, levels] += tx + ty + tz`` for one field in one pass (see
    ``advection.advect``): the horizontal 2nd/5th-order flux differences along x and y, and the
    vertical one from the fluxes on the faces ``faces = (f_lo, f_hi)`` (zero outside them), with
    ``Vz[..., f - voff]`` the velocity on face ``f``, ``weights = (wm, wp)`` the 2nd-order weights
    of a stretched grid (or None) and ``rd`` the reciprocal layer thicknesses by level. Local."""
    wm, wp = (_EMPTY1, _EMPTY1) if weights is None else weights
    _advect(tend, phi, Vx, Vy, Vz, int(h), scheme == "5th", float(dx), float(dy), int(faces[0]), int(faces[1]),
            int(voff), wm, wp, rd, int(levels[0]), int(levels[1]), _chunks(Vy.shape[0]))


def _chunks(n: int) -> int:
    """How many chunks of consecutive columns the parallel loops share: a few per thread, so the
    threads stay balanced, yet long enough that carrying face fluxes along a chunk pays."""
    return max(1, min(n, 4 * numba.get_num_threads()))


_EMPTY1 = np.zeros(0)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _edges(u, v, w, dzh, dx, dy, suv, suw, svw):  # pragma: no cover - compiled
    # the three edge sums of subgrid._edges on the core; the rim stays zero (filled by the caller)
    nx, ny, nz = u.shape
    for bi in numba.prange(1, nx - 1):
        for bj in range(1, ny - 1):
            for k in range(nz):
                suv[bi, bj, k] = (u[bi, bj, k] - u[bi, bj - 1, k]) / dy + (v[bi, bj, k] - v[bi - 1, bj, k]) / dx
            for m in range(nz - 1):
                suw[bi, bj, m] = (u[bi, bj, m + 1] - u[bi, bj, m]) / dzh[m + 1] \
                    + (w[bi, bj, m + 1] - w[bi - 1, bj, m + 1]) / dx
                svw[bi, bj, m] = (v[bi, bj, m + 1] - v[bi, bj, m]) / dzh[m + 1] \
                    + (w[bi, bj, m + 1] - w[bi, bj - 1, m + 1]) / dy


def edges(u, v, w, dzh, dx: float, dy: float):
    """``(suv, suw, svw)`` of ``subgrid._edges`` (block arrays, zero rim) in one pass. Local."""
    nx, ny, nz = u.shape
    suv = np.zeros((nx, ny, nz))
    suw = np.zeros((nx, ny, max(nz - 1, 0)))
    svw = np.zeros((nx, ny, max(nz - 1, 0)))
    _edges(u, v, w, dzh, float(dx), float(dy), suv, suw, svw)
    return suv, suw, svw


@numba.njit(inline="always")
def _zface(sz, s0, i, j, f, nz):  # pragma: no cover - compiled
    # an edge sum on vertical face f = 0 .. nz: the surface value, the inner faces, zero at the lid
    if f == 0:
        return s0[i, j]
    if f == nz:
        return 0.0
    return sz[i, j, f - 1]


@numba.njit(parallel=True, fastmath=False, cache=True)
def _strain2(u, v, w, suv, suw, svw, s0u, s0v, dzf, dx, dy, out):  # pragma: no cover - compiled
    nx, ny, nz = u.shape
    for bi in numba.prange(1, nx - 1):
        for bj in range(1, ny - 1):
            for k in range(nz):
                a = (u[bi + 1, bj, k] - u[bi, bj, k]) / dx
                b = (v[bi, bj + 1, k] - v[bi, bj, k]) / dy
                c = (w[bi, bj, k + 1] - w[bi, bj, k]) / dzf[k]
                s2 = a * a + b * b + c * c
                p, q, r, s = suv[bi, bj, k], suv[bi, bj + 1, k], suv[bi + 1, bj, k], suv[bi + 1, bj + 1, k]
                s2 = s2 + 0.125 * (p * p + q * q + r * r + s * s)
                p, q = _zface(suw, s0u, bi, bj, k, nz), _zface(suw, s0u, bi, bj, k + 1, nz)
                r, s = _zface(suw, s0u, bi + 1, bj, k, nz), _zface(suw, s0u, bi + 1, bj, k + 1, nz)
                s2 = s2 + 0.125 * (p * p + q * q + r * r + s * s)
                p, q = _zface(svw, s0v, bi, bj, k, nz), _zface(svw, s0v, bi, bj, k + 1, nz)
                r, s = _zface(svw, s0v, bi, bj + 1, k, nz), _zface(svw, s0v, bi, bj + 1, k + 1, nz)
                out[bi, bj, k] = s2 + 0.125 * (p * p + q * q + r * r + s * s)


def strain2(u, v, w, edges, shear_uw, shear_vw, dzf, dx: float, dy: float):
    """``S_ij S_ij`` of ``subgrid.strain2`` (a block array, zero rim) in one pass; ``shear_uw``,
    ``shear_vw``: the surface shear as 2-D block arrays. Local."""
    out = np.zeros(u.shape)
    suv, suw, svw = edges
    _strain2(u, v, w, suv, suw, svw, np.ascontiguousarray(shear_uw, dtype=np.float64),
             np.ascontiguousarray(shear_vw, dtype=np.float64), dzf, float(dx), float(dy), out)
    return out


@numba.njit(inline="always")
def _max(a, b):  # pragma: no cover - compiled
    # np.maximum: NaN in a propagates
    return a if (a >= b or a != a) else b


@numba.njit(inline="always")
def _min(a, b):  # pragma: no cover - compiled
    # np.minimum: NaN in b propagates (a is the finite length scale)
    return a if (a <= b) else b


@numba.njit(parallel=True, fastmath=False, cache=True)
def _tke_closure(e12f, thv, zf, grav_thvf, delta, cm, cn, ch1, ch2, e12min, ekmin,
                 ekm, ekh, zlt, e12, n2):  # pragma: no cover - compiled
    nx, ny, nz = e12f.shape
    for i in numba.prange(nx):
        for j in range(ny):
            for k in range(nz):
                e = _max(e12f[i, j, k], e12min)
                if k == 0:
                    d = (thv[i, j, 1] - thv[i, j, 0]) / (zf[1] - zf[0])
                elif k == nz - 1:
                    d = (thv[i, j, nz - 1] - thv[i, j, nz - 2]) / (zf[nz - 1] - zf[nz - 2])
                else:
                    d = (thv[i, j, k + 1] - thv[i, j, k - 1]) / (zf[k + 1] - zf[k - 1])
                nn = grav_thvf[k] * d
                if nn > 0:
                    zl = _min(delta[k], cn * e / np.sqrt(_max(nn, 1e-30)))
                else:
                    zl = delta[k] + 0.0 * e
                m = cm * zl * e
                h = (ch1 + ch2 * zl / delta[k]) * m
                ekm[i, j, k] = _max(m, ekmin)
                ekh[i, j, k] = _max(h, ekmin)
                zlt[i, j, k], e12[i, j, k], n2[i, j, k] = zl, e, nn


def tke_closure(e12f, thv, zf, grav_thvf, delta, cm, cn, ch1, ch2, e12min, ekmin):
    """``(ekm, ekh, zlt, e12, n2)`` of ``subgrid.SubgridTKE.closure`` in one pass;
    ``grav_thvf``: ``g / thv_ref`` by level. Local."""
    out = [np.empty(e12f.shape) for _ in range(5)]
    _tke_closure(e12f, thv, zf, grav_thvf, delta, float(cm), float(cn), float(ch1), float(ch2),
                 float(e12min), float(ekmin), *out)
    return tuple(out)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _rk_update(a, start, dt, tend, i0, i1, j0, j1, floor, has_floor):  # pragma: no cover - compiled
    nz = a.shape[2]
    for i in numba.prange(i0, i1):
        for j in range(j0, j1):
            for k in range(nz):
                x = start[i, j, k] + dt * tend[i, j, k]
                a[i, j, k] = _max(x, floor) if has_floor else x


def rk_update(a, start, dt: float, tend, interior, floor=None) -> None:
    """``a[interior] = start[interior] + dt * tend[interior]``, then at least ``floor`` when given
    (NumPy's maximum), in one pass: the Runge-Kutta stage update of one field. Local."""
    I, J = interior
    _rk_update(a, start, float(dt), tend, I.start, I.stop, J.start, J.stop,
               0.0 if floor is None else float(floor), floor is not None)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _coriolis(u, v, tu, tv, h, nxl, nyl, f, cu, cv, ug, vg):  # pragma: no cover - compiled
    nz = u.shape[2]
    for a in numba.prange(nxl):
        i = h + a
        for j in range(h, h + nyl):
            for k in range(nz):
                v_at_u = 0.25 * (v[i, j, k] + v[i, j + 1, k] + v[i - 1, j, k] + v[i - 1, j + 1, k]) + cv
                u_at_v = 0.25 * (u[i, j, k] + u[i + 1, j, k] + u[i, j - 1, k] + u[i + 1, j - 1, k]) + cu
                tu[i, j, k] += f * (v_at_u - vg[k])
                tv[i, j, k] -= f * (u_at_v - ug[k])


def coriolis(u, v, tu, tv, h: int, nxl: int, nyl: int, f: float, cu: float, cv: float, ug, vg) -> None:
    """Add the Coriolis tendencies of ``forcings.Coriolis`` to ``tu`` and ``tv`` in one pass;
    ``ug``, ``vg``: the geostrophic wind by level. Local."""
    _coriolis(u, v, tu, tv, int(h), int(nxl), int(nyl), float(f), float(cu), float(cv), ug, vg)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _subsidence(s, t, h, nxl, nyl, wls, dzh):  # pragma: no cover - compiled
    nz = s.shape[2]
    for a in numba.prange(nxl):
        i = h + a
        for j in range(h, h + nyl):
            for k in range(nz):
                up = (s[i, j, k + 1] - s[i, j, k]) / dzh[k + 1] if k + 1 < nz else 0.0
                down = (s[i, j, k] - s[i, j, k - 1]) / dzh[k] if k > 0 else 0.0
                t[i, j, k] -= wls[k] * up if wls[k] < 0 else wls[k] * down


def subsidence(s, t, h: int, nxl: int, nyl: int, wls, dzh) -> None:
    """Subtract ``forcings.Subsidence``'s upwind ``w_ls ds/dz`` from the tendency ``t`` of the
    field ``s`` in one pass. Local."""
    _subsidence(s, t, int(h), int(nxl), int(nyl), wls, dzh)


@numba.njit(inline="always")
def _div(u, v, w, i, j, k, dx, dy, rdzf):  # pragma: no cover - compiled
    return (u[i + 1, j, k] - u[i, j, k]) / dx + (v[i, j + 1, k] - v[i, j, k]) / dy + (w[i, j, k + 1] - w[i, j, k]) * rdzf[k]


@numba.njit(parallel=True, fastmath=False, cache=True)
def _projection_rhs(tu, tv, tw, su, sv, sw, with_start, rdt, h, dx, dy, rdzf, out):  # pragma: no cover
    nxl, nyl, nz = out.shape
    for a in numba.prange(nxl):
        i = h + a
        for b in range(nyl):
            j = h + b
            for k in range(nz):
                d = _div(tu, tv, tw, i, j, k, dx, dy, rdzf)
                out[a, b, k] = d + _div(su, sv, sw, i, j, k, dx, dy, rdzf) * rdt if with_start else d


def projection_rhs(tend, start, rdt: float, h: int, nxl: int, nyl: int, dx: float, dy: float, rdzf):
    """The right-hand side of ``pressure.PressureProjection``'s Poisson equation,
    ``div(tend) + div(start) * rdt`` on the interior (``start`` may be None), in one pass. Local."""
    out = np.empty((nxl, nyl, tend[0].shape[2]))
    s = tend if start is None else start
    _projection_rhs(*tend, *s, start is not None, float(rdt), int(h), float(dx), float(dy), rdzf, out)
    return out


@numba.njit(parallel=True, fastmath=False, cache=True)
def _subtract_gradient(tu, tv, tw, p, h, nxl, nyl, dx, dy, rdzh):  # pragma: no cover - compiled
    nz = p.shape[2]
    for a in numba.prange(nxl):
        i = h + a
        for j in range(h, h + nyl):
            for k in range(nz):
                tu[i, j, k] -= (p[i, j, k] - p[i - 1, j, k]) / dx
                tv[i, j, k] -= (p[i, j, k] - p[i, j - 1, k]) / dy
                if k > 0:
                    tw[i, j, k] -= (p[i, j, k] - p[i, j, k - 1]) * rdzh[k]


def subtract_gradient(tu, tv, tw, p, h: int, nxl: int, nyl: int, dx: float, dy: float, rdzh) -> None:
    """Subtract ``grad p`` from the momentum tendencies on the interior (``w``: inner levels), as
    ``pressure.PressureProjection`` does, in one pass. Local."""
    _subtract_gradient(tu, tv, tw, p, int(h), int(nxl), int(nyl), float(dx), float(dy), rdzh)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _sponge(s, t, h, nxl, nyl, rate, target):  # pragma: no cover - compiled
    m = rate.shape[0]
    k0 = s.shape[2] - m
    for a in numba.prange(nxl):
        i = h + a
        for j in range(h, h + nyl):
            for q in range(m):
                t[i, j, k0 + q] -= rate[q] * (s[i, j, k0 + q] - target[q])


def sponge(s, t, h: int, nxl: int, nyl: int, rate, target) -> None:
    """Subtract the sponge layer's ``rate (s - target)`` from the tendency ``t`` of the field ``s`` on
    the top ``len(rate)`` levels of the interior in one pass (``ops.sponge``). Local."""
    _sponge(s, t, int(h), int(nxl), int(nyl), rate, target)


__all__ += ["sponge"]

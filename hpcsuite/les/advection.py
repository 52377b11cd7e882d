"""Advection in flux form on the staggered grid: 2nd-order central and 5th-order upwind, per variable.

Every advective tendency is ``-d(V phi)/dx_d`` summed over the three directions, with the flux
``V phi`` on the faces *between* consecutive points of ``phi`` along ``d``: the advecting velocity
``V`` is the velocity component interpolated to that face (for momentum: the average of the two
neighbouring velocity points), and ``phi`` is interpolated to it by

* ``"2nd"``: the linear average (in z weighted by the layer thicknesses on a stretched grid);
* ``"5th"``: the 5th-order upwind-biased value, written as the 6th-order central value minus a
  dissipative part times ``sign(V)`` (as DALES ``advec_5th``). Horizontally it needs three halo
  cells; vertically the order drops to 3 and then 2 where the stencil would cross the surface or
  the lid (DALES does the same).

Terms use ``ctx.xp`` only, so the same source runs on NumPy and CuPy.
"""
from __future__ import annotations

import numpy as np

from . import fused, gpukernels
from .thermo import concat

__all__ = ["Advection", "SCHEMES", "advect", "face_velocities"]

SCHEMES = ("2nd", "5th")


def _sl(axis: int, start: int, n: int, base: tuple) -> tuple:
    """``base`` with ``slice(start, start + n)`` along ``axis``."""
    idx = list(base)
    idx[axis] = slice(start, start + n)
    return tuple(idx)


def _face_value(phi, V, axis: int, f0: int, nf: int, base: tuple, scheme: str, xp):
    """``phi`` interpolated to the ``nf`` faces ``f0 .. f0+nf-1`` along ``axis`` (face ``f`` lies
    between points ``f-1`` and ``f``); ``V`` is the advecting velocity there (its sign picks the
    upwind side). Uniform spacing along ``axis``."""
    p = lambda o: phi[_sl(axis, f0 + o, nf, base)]      # noqa: E731  (phi[f + o] over the faces)
    if scheme == "2nd":
        return 0.5 * (p(-1) + p(0))
    if scheme == "3rd":
        cen = (7.0 * (p(-1) + p(0)) - (p(-2) + p(1))) / 12.0
        dis = (3.0 * (p(0) - p(-1)) - (p(1) - p(-2))) / 12.0
    else:
        cen = (37.0 * (p(-1) + p(0)) - 8.0 * (p(-2) + p(1)) + (p(-3) + p(2))) / 60.0
        dis = (10.0 * (p(0) - p(-1)) - 5.0 * (p(1) - p(-2)) + (p(2) - p(-3))) / 60.0
    return cen - xp.sign(V) * dis


def _horizontal(phi, V, axis: int, spacing: float, scheme: str, g, xp):
    """Tendency ``-(F[i+1] - F[i]) / spacing`` on the interior, ``F = V phi_face``; ``V`` is given on
    the ``n + 1`` faces ``h .. h+n`` along ``axis`` over the interior of the other axis."""
    h = g.h
    if fused.on_cpu() and scheme in ("2nd", "5th") and isinstance(phi, np.ndarray) and isinstance(V, np.ndarray):
        # the same operations in one pass (numba)
        return fused.horizontal_advection(phi, V, axis, h, g.nxl, g.nyl, spacing, scheme)
    base = [slice(h, h + g.nxl), slice(h, h + g.nyl), slice(None)]
    n = g.nxl if axis == 0 else g.nyl
    F = V * _face_value(phi, V, axis, h, n + 1, tuple(base), scheme, xp)
    return -(F[_sl(axis, 1, n, (slice(None),) * 3)] - F[_sl(axis, 0, n, (slice(None),) * 3)]) / spacing


def _vertical_faces(phi, V, f_lo: int, f_hi: int, scheme: str, g, xp, weights=None):
    """``V phi_face`` on the vertical faces ``f_lo .. f_hi - 1`` (face ``f`` between ``phi[..., f-1]``
    and ``phi[..., f]``) over the interior columns; ``V`` covers the same faces. The 5th-order stencil
    drops to 3rd and 2nd order next to the first and last point of ``phi``. ``weights`` =
    ``(wm, wp)``: 2nd-order weights of ``phi[f-1]`` and ``phi[f]`` per face (stretched grids)."""
    h = g.h
    I, J = slice(h, h + g.nxl), slice(h, h + g.nyl)
    npts = phi.shape[2]
    col = phi[I, J, :]
    if weights is not None:
        wm, wp = weights
        low = wm * col[:, :, f_lo - 1:f_hi - 1] + wp * col[:, :, f_lo:f_hi]
    else:
        low = 0.5 * (col[:, :, f_lo - 1:f_hi - 1] + col[:, :, f_lo:f_hi])
    if scheme == "2nd":
        return V * low
    parts = []
    for order, a, b in _runs(f_lo, f_hi, npts):
        Vs = V[:, :, a - f_lo:b - f_lo]
        if order == "2nd":
            parts.append(Vs * low[:, :, a - f_lo:b - f_lo])
        else:
            parts.append(Vs * _face_value(col, Vs, 2, a, b - a, (slice(None),) * 3, order, xp))
    return parts[0] if len(parts) == 1 else concat(xp)(parts, axis=2)


def _runs(f_lo: int, f_hi: int, npts: int) -> list:
    """Faces ``f_lo .. f_hi-1`` grouped into runs ``(order, start, stop)`` of the widest upwind
    stencil that stays inside the ``npts`` points: 5th needs ``f-3 .. f+2``, 3rd ``f-2 .. f+1``."""
    runs = []
    for f in range(f_lo, f_hi):
        order = "5th" if (f >= 3 and f + 2 <= npts - 1) else "3rd" if (f >= 2 and f + 1 <= npts - 1) else "2nd"
        if runs and runs[-1][0] == order:
            runs[-1][2] = f + 1
        else:
            runs.append([order, f, f + 1])
    return [tuple(r) for r in runs]


def zeros(xp, shape, like):
    """Zeros of ``like``'s dtype on ``like``'s device (CuPy allocates on the current device; the
    strict checker needs the device named)."""
    if getattr(xp, "__name__", "").startswith("array_api_strict"):
        return xp.zeros(shape, dtype=like.dtype, device=like.device)
    return xp.zeros(shape, dtype=like.dtype)


def _fused_kernel(scheme: str, phi, tend, *more):
    """The one-pass kernel for this field's whole tendency, or None (then the array-API source
    runs): ``fused.advect_into`` on NumPy arrays, ``gpukernels.advect_into`` on CuPy arrays. Both do
    the source's operations in the same order, bit-identical."""
    if scheme not in SCHEMES:
        return None
    if fused.on_cpu() and isinstance(phi, np.ndarray) and isinstance(tend, np.ndarray):
        return fused.advect_into
    if gpukernels.usable(phi, tend, *more, strided=True):
        return gpukernels.advect_into
    return None


def face_velocities(ctx, name: str):
    """``(Vx, Vy, Vz)``: the velocities that advect field ``name`` through the faces around the
    interior cells (see :func:`advect`); views of the fields for scalars, new arrays for momentum.
    On a GPU a momentum field's three come from one kernel launch. Local."""
    xp, g, zg = ctx.xp, ctx.grid, ctx.zgrid
    f = ctx.fields
    u, v, w = f["u"], f["v"], f["w"]
    h, nxl, nyl, nz = g.h, g.nxl, g.nyl, g.nz
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    Ie, Je = slice(h, h + nxl + 1), slice(h, h + nyl + 1)          # the faces around the interior
    Iw, Js = slice(h - 1, h + nxl), slice(h - 1, h + nyl)          # the same faces, one point back
    if name in ("u", "v", "w") and gpukernels.usable(u, v, w, zg.wlo, zg.whi):
        return gpukernels.face_velocities(xp, name, u, v, w, h, nxl, nyl, zg.wlo, zg.whi)
    if name in ("u", "v", "w") and fused.on_cpu() and all(isinstance(a, np.ndarray) for a in (u, v, w, zg.wlo, zg.whi)):
        return fused.face_velocities(name, u, v, w, h, nxl, nyl, zg.wlo, zg.whi)      # (numba, one pass)
    if name == "w":
        # w points at zh[k]; faces in x at (i - 1/2, zh[k]): u interpolated to zh[k]
        a, b = zg.whi, zg.wlo                           # weights of u[k] (upper) and u[k-1]
        Vx = zeros(xp, (nxl + 1, nyl, nz + 1), u)
        Vx[:, :, 1:nz] = b * u[Ie, J, 0:nz - 1] + a * u[Ie, J, 1:nz]
        Vy = zeros(xp, (nxl, nyl + 1, nz + 1), v)
        Vy[:, :, 1:nz] = b * v[I, Je, 0:nz - 1] + a * v[I, Je, 1:nz]
        # vertical faces at zf[k-1], between w[k-1] and w[k], k = 1 .. nz
        return Vx, Vy, 0.5 * (w[I, J, 0:nz] + w[I, J, 1:nz + 1])
    if name == "u":                                                 # at cell centres i - 1 .. i + nxl - 1
        return (0.5 * (u[Iw, J, ...] + u[Ie, J, ...]), 0.5 * (v[h - 1:h + nxl - 1, Je, ...] + v[I, Je, ...]),
                0.5 * (w[h - 1:h + nxl - 1, J, ...] + w[I, J, ...]))
    if name == "v":
        return (0.5 * (u[Ie, h - 1:h + nyl - 1, ...] + u[Ie, J, ...]), 0.5 * (v[I, Js, ...] + v[I, Je, ...]),
                0.5 * (w[I, h - 1:h + nyl - 1, ...] + w[I, J, ...]))
    return u[Ie, J, ...], v[I, Je, ...], w[I, J, ...]


def advect(ctx, name: str, scheme: str) -> None:
    """Add the advective tendency of field ``name`` with ``scheme`` to ``ctx.tend[name]``. Local
    (halos of u, v, w and the field must be valid)."""
    xp, g, zg = ctx.xp, ctx.grid, ctx.zgrid
    f = ctx.fields
    phi = f[name]
    h, nxl, nyl, nz = g.h, g.nxl, g.nyl, g.nz
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    tend = ctx.tend[name]
    Vx, Vy, Vz = face_velocities(ctx, name)
    if name == "w":
        fuse = _fused_kernel(scheme, phi, tend, Vx, Vy, Vz, zg.rdzh)
        if fuse is not None:
            fuse(tend, phi, Vx, Vy, Vz, h, scheme, g.dx, g.dy, (1, nz + 1), 1, None, zg.rdzh, (1, nz))
            return
        tx = _horizontal(phi, Vx, 0, g.dx, scheme, g, xp)
        ty = _horizontal(phi, Vy, 1, g.dy, scheme, g, xp)
        F = _vertical_faces(phi, Vz, 1, nz + 1, scheme, g, xp)
        tz = -(F[:, :, 1:nz] - F[:, :, 0:nz - 1]) * zg.rdzh[1:nz]
        tend[I, J, 1:nz] += tx[:, :, 1:nz] + ty[:, :, 1:nz] + tz
        return
    Wz = Vz
    # (for u along x and v along y the faces between consecutive points are the cell centres:
    # the same index window, with the averaged velocity as V)
    wm, wp = zg.wlo, zg.whi                             # weights of phi[k-1] and phi[k] at zh[k]
    fuse = _fused_kernel(scheme, phi, tend, Vx, Vy, Wz, zg.rdzf, wm, wp) if nz > 1 else None
    if fuse is not None:
        fuse(tend, phi, Vx, Vy, Wz, h, scheme, g.dx, g.dy, (1, nz), 0, (wm, wp), zg.rdzf, (0, nz))
        return
    tx = _horizontal(phi, Vx, 0, g.dx, scheme, g, xp)
    ty = _horizontal(phi, Vy, 1, g.dy, scheme, g, xp)
    tz = 0.0
    if nz > 1:
        F = _vertical_faces(phi, Wz[:, :, 1:nz], 1, nz, scheme, g, xp, weights=(wm, wp))
        zero = zeros(xp, (nxl, nyl, 1), phi)
        F = concat(xp)([zero, F, zero], axis=2)     # no flux through the surface and the lid
        tz = -(F[:, :, 1:] - F[:, :, :-1]) * zg.rdzf
    tend[I, J, :] += tx + ty + tz


class Advection:
    """The advection term: ``Advection({"u": "5th", "thl": "2nd", ...}, default="2nd")``.

    Advects every field in ``ctx.fields`` (momentum, thl, qt, e12, sv*) with its scheme. Local
    (reads halos, no communication).
    """

    def __init__(self, schemes: dict | None = None, default: str = "2nd"):
        schemes = dict(schemes or {})
        for k, s in list(schemes.items()) + [("default", default)]:
            if s not in SCHEMES:
                raise ValueError(f"advection scheme for {k!r} must be one of {', '.join(SCHEMES)}, got {s!r}")
        self.schemes, self.default = schemes, default

    def scheme(self, name: str) -> str:
        return self.schemes.get(name, self.default)

    def __call__(self, ctx) -> None:
        together = _scalars_in_one_launch(ctx, [n for n in ctx.fields if n not in ("u", "v", "w")], self.scheme)
        for name in ctx.fields:
            if name not in together:
                advect(ctx, name, self.scheme(name))
        if together:
            zg, g = ctx.zgrid, ctx.grid
            Vx, Vy, Vz = face_velocities(ctx, together[0])           # (views of u, v, w)
            gpukernels.advect_many_into([ctx.tend[n] for n in together], [ctx.fields[n] for n in together],
                                        Vx, Vy, Vz, g.h, [self.scheme(n) for n in together], g.dx, g.dy,
                                        (1, g.nz), 0, (zg.wlo, zg.whi), zg.rdzf, (0, g.nz))


def _scalars_in_one_launch(ctx, names, scheme) -> list:
    """The scalar fields among ``names`` that one CUDA launch advects together (those whose
    :func:`advect` would launch ``gpukernels.advect_into`` with arrays of the same strides), or []
    (fewer than two, or not on a GPU): the same operations as field by field."""
    zg, nz = ctx.zgrid, ctx.grid.nz
    if len(names) < 2 or nz < 2:
        return []
    f, t = ctx.fields, ctx.tend
    Vx, Vy, Vz = face_velocities(ctx, names[0])
    ok = [n for n in names if n in t and scheme(n) in SCHEMES
          and _fused_kernel(scheme(n), f[n], t[n], Vx, Vy, Vz, zg.rdzf, zg.wlo, zg.whi) is gpukernels.advect_into
          and f[n].strides == f[names[0]].strides and t[n].strides == t[names[0]].strides]
    return ok if len(ok) >= 2 else []

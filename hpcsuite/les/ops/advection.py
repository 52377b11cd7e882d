"""Advection operators: the face velocities of a momentum field (``face_velocities``), one field's
advective tendency (``advect_into``) and several scalars' at once (``advect_many_into``).

The reference is the array-API source below (see :mod:`hpcsuite.les.advection` for the scheme);
``les.fused.advect_into`` / ``face_velocities`` (numba) and ``les.gpukernels.advect_into`` /
``advect_many_into`` / ``face_velocities`` (CUDA) do its operations in the same order, bit-identical.
All functions here are local.
"""
from __future__ import annotations

from ...runtime.device import concat
from .. import fused, gpukernels
from .common import cuda_arrays, numba_arrays, random, zeros
from .registry import Operator

__all__ = ["SCHEMES", "face_velocities", "advect_into", "advect_many_into"]

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


def _horizontal(phi, V, axis: int, spacing: float, scheme: str, h: int, nxl: int, nyl: int, xp):
    """Tendency ``-(F[i+1] - F[i]) / spacing`` on the interior, ``F = V phi_face``; ``V`` is given on
    the ``n + 1`` faces ``h .. h+n`` along ``axis`` over the interior of the other axis."""
    base = [slice(h, h + nxl), slice(h, h + nyl), slice(None)]
    n = nxl if axis == 0 else nyl
    F = V * _face_value(phi, V, axis, h, n + 1, tuple(base), scheme, xp)
    return -(F[_sl(axis, 1, n, (slice(None),) * 3)] - F[_sl(axis, 0, n, (slice(None),) * 3)]) / spacing


def _vertical_faces(phi, V, f_lo: int, f_hi: int, scheme: str, h: int, nxl: int, nyl: int, xp, weights=None):
    """``V phi_face`` on the vertical faces ``f_lo .. f_hi - 1`` (face ``f`` between ``phi[..., f-1]``
    and ``phi[..., f]``) over the interior columns; ``V`` covers the same faces. The 5th-order stencil
    drops to 3rd and 2nd order next to the first and last point of ``phi``. ``weights`` =
    ``(wm, wp)``: 2nd-order weights of ``phi[f-1]`` and ``phi[f]`` per face (stretched grids)."""
    I, J = slice(h, h + nxl), slice(h, h + nyl)
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
    for order, a, b in runs(f_lo, f_hi, npts):
        Vs = V[:, :, a - f_lo:b - f_lo]
        if order == "2nd":
            parts.append(Vs * low[:, :, a - f_lo:b - f_lo])
        else:
            parts.append(Vs * _face_value(col, Vs, 2, a, b - a, (slice(None),) * 3, order, xp))
    return parts[0] if len(parts) == 1 else concat(xp)(parts, axis=2)


def runs(f_lo: int, f_hi: int, npts: int) -> list:
    """Faces ``f_lo .. f_hi-1`` grouped into runs ``(order, start, stop)`` of the widest upwind
    stencil that stays inside the ``npts`` points: 5th needs ``f-3 .. f+2``, 3rd ``f-2 .. f+1``."""
    out = []
    for f in range(f_lo, f_hi):
        order = "5th" if (f >= 3 and f + 2 <= npts - 1) else "3rd" if (f >= 2 and f + 1 <= npts - 1) else "2nd"
        if out and out[-1][0] == order:
            out[-1][2] = f + 1
        else:
            out.append([order, f, f + 1])
    return [tuple(r) for r in out]


# ---------------------------------------------------------------------------------------------
# face_velocities(xp, name, u, v, w, h, nxl, nyl, wlo, whi) -> (Vx, Vy, Vz) of a momentum field
def _face_velocities_reference(xp, name, u, v, w, h, nxl, nyl, wlo, whi):
    nz = u.shape[2]
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    Ie, Je = slice(h, h + nxl + 1), slice(h, h + nyl + 1)          # the faces around the interior
    Iw, Js = slice(h - 1, h + nxl), slice(h - 1, h + nyl)          # the same faces, one point back
    if name == "w":
        # w points at zh[k]; faces in x at (i - 1/2, zh[k]): u interpolated to zh[k]
        a, b = whi, wlo                                 # weights of u[k] (upper) and u[k-1]
        Vx = zeros(xp, (nxl + 1, nyl, nz + 1), u)
        Vx[:, :, 1:nz] = b * u[Ie, J, 0:nz - 1] + a * u[Ie, J, 1:nz]
        Vy = zeros(xp, (nxl, nyl + 1, nz + 1), v)
        Vy[:, :, 1:nz] = b * v[I, Je, 0:nz - 1] + a * v[I, Je, 1:nz]
        # vertical faces at zf[k-1], between w[k-1] and w[k], k = 1 .. nz
        return Vx, Vy, 0.5 * (w[I, J, 0:nz] + w[I, J, 1:nz + 1])
    if name == "u":                                                 # at cell centres i - 1 .. i + nxl - 1
        return (0.5 * (u[Iw, J, ...] + u[Ie, J, ...]), 0.5 * (v[h - 1:h + nxl - 1, Je, ...] + v[I, Je, ...]),
                0.5 * (w[h - 1:h + nxl - 1, J, ...] + w[I, J, ...]))
    return (0.5 * (u[Ie, h - 1:h + nyl - 1, ...] + u[Ie, J, ...]), 0.5 * (v[I, Js, ...] + v[I, Je, ...]),
            0.5 * (w[I, h - 1:h + nyl - 1, ...] + w[I, J, ...]))


def _face_velocities_check(xp, name, u, v, w, h, nxl, nyl, wlo, whi) -> None:
    if name not in ("u", "v", "w"):
        raise ValueError(f"les.ops.face_velocities: name must be 'u', 'v' or 'w', got {name!r}")
    if v.shape != u.shape or w.shape[:2] != u.shape[:2] or w.shape[2] != u.shape[2] + 1:
        raise ValueError(f"les.ops.face_velocities: u, v (nz levels) and w (nz + 1) of one block, got "
                         f"{u.shape}, {v.shape}, {w.shape}")


def _momentum(case, rng):
    f = case.fields
    return tuple(random(case, rng, f[n].shape) for n in "uvw")


def _face_velocities_example(case, rng):
    g, zg = case.grid, case.zgrid
    name = ("u", "v", "w")[int(rng.integers(3))]
    return (case.xp, name, *_momentum(case, rng), g.h, g.nxl, g.nyl, zg.wlo, zg.whi), {}


face_velocities = Operator("face_velocities", _face_velocities_reference, check=_face_velocities_check,
                           example=_face_velocities_example)
face_velocities.__doc__ = """``(Vx, Vy, Vz)``: the velocities that advect momentum field ``name`` through
the faces around the interior cells (new arrays). Local."""
face_velocities.register(
    "numba", lambda xp, *a: fused.face_velocities(*a),
    lambda xp, name, u, v, w, h, nxl, nyl, wlo, whi: numba_arrays(u, v, w, wlo, whi))
face_velocities.register(
    "cuda", lambda *a: gpukernels.face_velocities(*a),
    lambda xp, name, u, v, w, h, nxl, nyl, wlo, whi: cuda_arrays(u, v, w, wlo, whi))


# ---------------------------------------------------------------------------------------------
# advect_into(xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights): tend[interior] += advection
def _is_w(weights) -> bool:
    return weights is None


def _advect_reference(xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights) -> None:
    nxl, nyl = Vx.shape[0] - 1, Vy.shape[1] - 1
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    if _is_w(weights):                                  # phi at the nz + 1 w levels; rd = 1/dzh
        nz = phi.shape[2] - 1
        tx = _horizontal(phi, Vx, 0, dx, scheme, h, nxl, nyl, xp)
        ty = _horizontal(phi, Vy, 1, dy, scheme, h, nxl, nyl, xp)
        F = _vertical_faces(phi, Vz, 1, nz + 1, scheme, h, nxl, nyl, xp)
        tz = -(F[:, :, 1:nz] - F[:, :, 0:nz - 1]) * rd[1:nz]
        tend[I, J, 1:nz] += tx[:, :, 1:nz] + ty[:, :, 1:nz] + tz
        return
    nz = phi.shape[2]
    # (for u along x and v along y the faces between consecutive points are the cell centres:
    # the same index window, with the averaged velocity as V)
    tx = _horizontal(phi, Vx, 0, dx, scheme, h, nxl, nyl, xp)
    ty = _horizontal(phi, Vy, 1, dy, scheme, h, nxl, nyl, xp)
    tz = 0.0
    if nz > 1:
        F = _vertical_faces(phi, Vz[:, :, 1:nz], 1, nz, scheme, h, nxl, nyl, xp, weights=weights)
        zero = zeros(xp, (nxl, nyl, 1), phi)
        F = concat(xp)([zero, F, zero], axis=2)     # no flux through the surface and the lid
        tz = -(F[:, :, 1:] - F[:, :, :-1]) * rd
    tend[I, J, :] += tx + ty + tz


def _kernel_arguments(tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights) -> tuple:
    """The arguments of ``fused.advect_into`` / ``gpukernels.advect_into`` for this call."""
    if _is_w(weights):
        nz = phi.shape[2] - 1
        return (tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, (1, nz + 1), 1, None, rd, (1, nz))
    nz = phi.shape[2]
    return (tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, (1, nz), 0, weights, rd, (0, nz))


def _advect_check(xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"les.ops.advect_into: scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if tend.shape != phi.shape:
        raise ValueError(f"les.ops.advect_into: tend and phi must have one shape, got {tend.shape} and {phi.shape}")


def _kernel_fits(tend, phi, Vx, Vy, Vz, rd, weights) -> tuple | None:
    """The arrays a kernel reads (None: no kernel for this field, e.g. a single level)."""
    if _is_w(weights):
        return (phi, tend, Vx, Vy, Vz, rd)
    if phi.shape[2] <= 1:
        return None
    return (phi, tend, Vx, Vy, Vz, rd, *weights)


def _advect_numba_ok(xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights) -> bool:
    arrays = _kernel_fits(tend, phi, Vx, Vy, Vz, rd, weights)
    return arrays is not None and numba_arrays(phi, tend)


def _advect_cuda_ok(xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights) -> bool:
    arrays = _kernel_fits(tend, phi, Vx, Vy, Vz, rd, weights)
    return arrays is not None and cuda_arrays(*arrays, strided=True)


def _advect_example(case, rng, name=None):
    g, zg = case.grid, case.zgrid
    name = name or ("u", "v", "w", "thl")[int(rng.integers(4))]
    u, v, w = _momentum(case, rng)
    Vx, Vy, Vz = face_velocities.reference(case.xp, name if name in "uvw" else "u", u, v, w, g.h, g.nxl, g.nyl,
                                           zg.wlo, zg.whi)
    phi = random(case, rng, case.fields[name].shape, 0.0, 2.0)
    tend = random(case, rng, phi.shape)
    scheme = SCHEMES[int(rng.integers(len(SCHEMES)))]
    if name == "w":
        return (case.xp, tend, phi, Vx, Vy, Vz, g.h, scheme, g.dx, g.dy, zg.rdzh, None), {}
    if name not in "uv":              # a scalar: advected by (views of) u, v, w themselves
        I, J = slice(g.h, g.h + g.nxl), slice(g.h, g.h + g.nyl)
        Vx, Vy, Vz = u[g.h:g.h + g.nxl + 1, J, ...], v[I, g.h:g.h + g.nyl + 1, ...], w[I, J, ...]
    return (case.xp, tend, phi, Vx, Vy, Vz, g.h, scheme, g.dx, g.dy, zg.rdzf, (zg.wlo, zg.whi)), {}


advect_into = Operator("advect_into", _advect_reference, check=_advect_check, example=_advect_example)
advect_into.__doc__ = """Add the advective tendency of ``phi`` with ``scheme`` to the interior of
``tend``. Local. ``(Vx, Vy, Vz)`` are the face velocities (:data:`face_velocities`, or views of u,
v, w for a scalar); ``weights = (wm, wp)`` the 2nd-order weights at ``zh`` and ``rd = 1/dzf`` for a
cell-centred field, ``weights = None`` and ``rd = 1/dzh`` for ``w`` (nz + 1 levels, zero at the walls)."""
advect_into.register("numba", lambda xp, *a: fused.advect_into(*_kernel_arguments(*a)), _advect_numba_ok)
advect_into.register("cuda", lambda xp, *a: gpukernels.advect_into(*_kernel_arguments(*a)), _advect_cuda_ok)


# ---------------------------------------------------------------------------------------------
# advect_many_into(xp, tends, phis, Vx, Vy, Vz, h, schemes, dx, dy, rd, weights): several scalars
def _advect_many_reference(xp, tends, phis, Vx, Vy, Vz, h, schemes, dx, dy, rd, weights) -> None:
    for tend, phi, scheme in zip(tends, phis, schemes):
        advect_into(xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights)


def _advect_many_check(xp, tends, phis, Vx, Vy, Vz, h, schemes, dx, dy, rd, weights) -> None:
    if not len(tends) == len(phis) == len(schemes):
        raise ValueError("les.ops.advect_many_into: one tendency and one scheme per field")
    if weights is None:
        raise ValueError("les.ops.advect_many_into: cell-centred fields only (weights given)")


def _advect_many_cuda_ok(xp, tends, phis, Vx, Vy, Vz, h, schemes, dx, dy, rd, weights) -> bool:
    if len(phis) < 2 or phis[0].shape[2] < 2:
        return False
    return all(_advect_cuda_ok(xp, t, p, Vx, Vy, Vz, h, s, dx, dy, rd, weights)
               for t, p, s in zip(tends, phis, schemes)) \
        and len({p.strides for p in phis}) == 1 and len({t.strides for t in tends}) == 1


def _advect_many_cuda(xp, tends, phis, Vx, Vy, Vz, h, schemes, dx, dy, rd, weights) -> None:
    nz = phis[0].shape[2]
    gpukernels.advect_many_into(list(tends), list(phis), Vx, Vy, Vz, h, list(schemes), dx, dy, (1, nz), 0,
                                weights, rd, (0, nz))


def _advect_many_example(case, rng):
    args, _ = _advect_example(case, rng, "thl")
    xp, tend, phi, Vx, Vy, Vz, h, scheme, dx, dy, rd, weights = args
    tends = [tend, random(case, rng, tend.shape), random(case, rng, tend.shape)]
    phis = [phi, random(case, rng, phi.shape), random(case, rng, phi.shape, 0.0, 0.02)]
    return (xp, tends, phis, Vx, Vy, Vz, h, ["2nd", "5th", scheme], dx, dy, rd, weights), {}


advect_many_into = Operator("advect_many_into", _advect_many_reference, check=_advect_many_check,
                            example=_advect_many_example)
advect_many_into.__doc__ = """:data:`advect_into` of several cell-centred fields advected by the same
face velocities (``schemes``: one per field); on a GPU one launch for all. Local."""
advect_many_into.register("cuda", _advect_many_cuda, _advect_many_cuda_ok)

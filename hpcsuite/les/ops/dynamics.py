"""Dynamics operators: the Runge-Kutta stage update of one field (``rk_update``), the pressure
projection's right-hand side and gradient (``projection_rhs``, ``subtract_gradient``), the time
step's Courant rate (``courant_rate``) and the prescribed surface's momentum fluxes
(``surface_momentum``).

The reference is the array-API source below; ``les.fused`` (numba) and ``les.gpukernels`` (CUDA)
are registered for it, bit-identical. All functions here are local.
"""
from __future__ import annotations

from .. import fused, gpukernels
from .common import cuda_arrays, numba_arrays, random
from .registry import Operator

__all__ = ["whole_max", "divergence", "rk_update", "projection_rhs", "subtract_gradient", "courant_rate",
           "surface_momentum"]


def whole_max(xp, a):
    """The largest element of ``a`` (a device scalar). Local.

    Reduced along the last axis first: CuPy reduces a whole array with one thread block, which
    takes milliseconds on a large grid (a fifth of an LES step at 512 x 512 x 128 on an H200), while
    a reduction with many outputs spreads over the whole GPU. The maximum does not depend on the
    order, so the result is the same on every backend.
    """
    return xp.max(xp.max(a, axis=-1)) if getattr(a, "ndim", 0) > 1 else xp.max(a)


def divergence(u, v, w, h, nxl, nyl, dx, dy, rdzf):
    """Discrete divergence on the interior cells (needs the east/north halo of u and v). Local."""
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    I1, J1 = slice(h + 1, h + nxl + 1), slice(h + 1, h + nyl + 1)
    return ((u[I1, J, ...] - u[I, J, ...]) / dx + (v[I, J1, ...] - v[I, J, ...]) / dy
            + (w[I, J, 1:] - w[I, J, :-1]) * rdzf)


def _block_example(case, rng, name):
    return random(case, rng, case.fields[name].shape)


# ---------------------------------------------------------------------------------------------
# rk_update(xp, a, start, dt, tend, interior, floor=None, zero_ends=False)
def _rk_update_reference(xp, a, start, dt, tend, interior, floor=None, zero_ends=False) -> None:
    I, J = interior
    a[I, J, ...] = start[I, J, ...] + dt * tend[I, J, ...]
    if floor is not None:
        a[I, J, ...] = xp.maximum(a[I, J, ...], floor)
    if zero_ends:
        a[..., 0] = 0.0
        a[..., -1] = 0.0


def _rk_update_numba(xp, a, start, dt, tend, interior, floor=None, zero_ends=False) -> None:
    fused.rk_update(a, start, dt, tend, interior, floor)
    if zero_ends:
        a[..., 0] = 0.0
        a[..., -1] = 0.0


def _rk_update_check(xp, a, start, dt, tend, interior, floor=None, zero_ends=False) -> None:
    if not a.shape == start.shape == tend.shape:
        raise ValueError(f"les.ops.rk_update: field, start and tendency of one shape, got {a.shape}, "
                         f"{start.shape}, {tend.shape}")


def _rk_update_example(case, rng):
    g = case.grid
    name = ("u", "w", "e12")[int(rng.integers(3))]
    a, start, tend = (_block_example(case, rng, name) for _ in range(3))
    return (case.xp, a, start, 0.37, tend, g.interior), {"floor": 0.1 if name == "e12" else None,
                                                          "zero_ends": name == "w"}


rk_update = Operator("rk_update", _rk_update_reference, check=_rk_update_check, example=_rk_update_example,
                     rim=3)
rk_update.__doc__ = """The Runge-Kutta stage update ``a = start + dt tend`` on the interior columns
``interior = (I, J)``, then ``max(a, floor)``; with ``zero_ends`` ``a`` is set to zero at its first and
last level (``w`` at the surface and the lid; at least on the interior columns: the halo update after
the stage fills the rest). Local."""
rk_update.register("numba", _rk_update_numba, lambda xp, a, start, dt, tend, *r, **k: numba_arrays(a, start, tend))
rk_update.register("cuda", lambda xp, *a, **k: gpukernels.rk_update(*a, **k),
                   lambda xp, a, start, dt, tend, *r, **k: cuda_arrays(a, start, tend))


# ---------------------------------------------------------------------------------------------
# projection_rhs(xp, tends, starts, rdt, h, nxl, nyl, dx, dy, rdzf) -> rhs (nxl, nyl, nz)
def _zero_w_ends(tw) -> None:
    tw[..., 0] = 0.0
    tw[..., -1] = 0.0


def _projection_rhs_reference(xp, tends, starts, rdt, h, nxl, nyl, dx, dy, rdzf):
    _zero_w_ends(tends[2])
    rhs = divergence(*tends, h, nxl, nyl, dx, dy, rdzf)
    if starts is not None:
        rhs = rhs + divergence(*starts, h, nxl, nyl, dx, dy, rdzf) * rdt
    return rhs


def _projection_rhs_numba(xp, tends, starts, rdt, h, nxl, nyl, dx, dy, rdzf):
    _zero_w_ends(tends[2])
    return fused.projection_rhs(tends, starts, rdt, h, nxl, nyl, dx, dy, rdzf)


def _projection_rhs_example(case, rng):
    g, zg = case.grid, case.zgrid
    tends = tuple(_block_example(case, rng, n) for n in "uvw")
    starts = tuple(_block_example(case, rng, n) for n in "uvw") if rng.random() < 0.7 else None
    return (case.xp, tends, starts, 1.0 / 7.0, g.h, g.nxl, g.nyl, g.dx, g.dy, zg.rdzf), {}


projection_rhs = Operator("projection_rhs", _projection_rhs_reference, example=_projection_rhs_example, rim=3)
projection_rhs.__doc__ = """The Poisson right-hand side ``div(tend) + div(start) / dt`` (``starts`` None:
without the second part) on the interior cells, a new ``(nxl, nyl, nz)`` array, after setting the w
tendency's first and last level to zero (at least on the interior columns). Local."""
projection_rhs.register("numba", _projection_rhs_numba,
                        lambda xp, tends, starts, rdt, h, nxl, nyl, dx, dy, rdzf: numba_arrays(tends[0], rdzf))
projection_rhs.register(
    "cuda", lambda xp, *a: gpukernels.projection_rhs(*a, zero_w_ends=True),
    lambda xp, tends, starts, rdt, h, nxl, nyl, dx, dy, rdzf: cuda_arrays(*tends, rdzf, *(starts or ())))


# ---------------------------------------------------------------------------------------------
# subtract_gradient(tu, tv, tw, p, h, nxl, nyl, dx, dy, rdzh)
def _subtract_gradient_reference(tu, tv, tw, p, h, nxl, nyl, dx, dy, rdzh) -> None:
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    nz = p.shape[2]
    tu[I, J, :] -= (p[I, J, ...] - p[h - 1:h - 1 + nxl, J, ...]) / dx
    tv[I, J, :] -= (p[I, J, ...] - p[I, h - 1:h - 1 + nyl, ...]) / dy
    tw[I, J, 1:nz] -= (p[I, J, 1:] - p[I, J, :-1]) * rdzh[1:nz]


def _subtract_gradient_example(case, rng):
    g, zg = case.grid, case.zgrid
    return (*(_block_example(case, rng, n) for n in "uvw"), _block_example(case, rng, "thl"), g.h, g.nxl, g.nyl,
            g.dx, g.dy, zg.rdzh), {}


subtract_gradient = Operator("subtract_gradient", _subtract_gradient_reference, example=_subtract_gradient_example)
subtract_gradient.__doc__ = """Subtract the gradient of the pressure block ``p`` (nz levels, valid west and
south halo) from the interior of the velocity tendencies (w's inner levels). Local."""
subtract_gradient.register("numba", lambda *a: fused.subtract_gradient(*a),
                           lambda tu, tv, tw, p, h, nxl, nyl, dx, dy, rdzh: numba_arrays(tu, tv, tw, p, rdzh))
subtract_gradient.register("cuda", lambda *a: gpukernels.subtract_gradient(*a),
                           lambda tu, tv, tw, p, h, nxl, nyl, dx, dy, rdzh: cuda_arrays(tu, tv, tw, p, rdzh))


# ---------------------------------------------------------------------------------------------
# courant_rate(xp, u, v, w, rdzh, h, nxl, nyl, dx, dy) -> max(|u|/dx + |v|/dy + |w|/dzh), a device scalar
def _courant_rate_reference(xp, u, v, w, rdzh, h, nxl, nyl, dx, dy):
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    au = xp.abs(u[I, J, ...])
    av = xp.abs(v[I, J, ...])
    aw = xp.abs(w[I, J, 1:])                # the top face of each cell (zero at the lid)
    return whole_max(xp, au / dx + av / dy + aw * rdzh[1:])


def _courant_rate_example(case, rng):
    g, zg = case.grid, case.zgrid
    u, v, w = (_block_example(case, rng, n) for n in "uvw")
    if rng.random() < 0.3:                  # a NaN or an infinity must show in the rate
        bad = (float("nan"), float("inf"))[int(rng.integers(2))]
        (u, v, w)[int(rng.integers(3))][g.h + 1, g.h, 2] = bad
    return (case.xp, u, v, w, zg.rdzh, g.h, g.nxl, g.nyl, g.dx, g.dy), {}


courant_rate = Operator("courant_rate", _courant_rate_reference, example=_courant_rate_example)
courant_rate.__doc__ = """The Courant rate ``max(|u|/dx + |v|/dy + |w|/dzh)`` over the interior (times dt:
the Courant number), a device scalar; a NaN or an infinity in a velocity shows in it. Local."""
courant_rate.register("cuda", lambda xp, u, v, w, rdzh, h, nxl, nyl, dx, dy: xp.max(
                          gpukernels.courant_columns(xp, u, v, w, rdzh, h, nxl, nyl, dx, dy)),
                      lambda xp, u, v, w, rdzh, *rest: cuda_arrays(u, v, w, rdzh))


# ---------------------------------------------------------------------------------------------
# surface_momentum(xp, u, v, cu, cv, us2, vmin) -> (uw, vw), 2-D blocks
def _surface_momentum_reference(xp, u, v, cu, cv, us2, vmin):
    u, v = u[..., 0] + cu, v[..., 0] + cv
    uw = xp.zeros_like(u)
    vw = xp.zeros_like(u)
    if us2 > 0:
        # u point (i, j): v averaged from the four surrounding v points (i-1..i, j..j+1)
        vu = 0.25 * (v[1:-1, 1:-1] + v[1:-1, 2:] + v[:-2, 1:-1] + v[:-2, 2:])
        uu = u[1:-1, 1:-1]
        uw[1:-1, 1:-1] = -us2 * uu / xp.maximum(xp.sqrt(uu * uu + vu * vu), vmin)
        # v point (i, j): u averaged from (i..i+1, j-1..j)
        uv = 0.25 * (u[1:-1, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[2:, :-2])
        vv = v[1:-1, 1:-1]
        vw[1:-1, 1:-1] = -us2 * vv / xp.maximum(xp.sqrt(uv * uv + vv * vv), vmin)
    return uw, vw


def _surface_momentum_example(case, rng):
    u, v = (_block_example(case, rng, n) for n in "uv")
    u[::3, ::2, 0] = -0.5 + 0.01                # calm points: |U| below the bound
    v[::3, ::2, 0] = -0.2 - 0.02
    return (case.xp, u, v, 0.5, 0.2, 0.28 ** 2, 0.1), {}


surface_momentum = Operator("surface_momentum", _surface_momentum_reference, example=_surface_momentum_example)
surface_momentum.__doc__ = """``(uw, vw)``: the momentum fluxes ``-u*^2 U_i / max(|U|, vmin)`` of a surface
with prescribed friction velocity (``us2 = u*^2``) at the u and v points of the lowest level, from the
velocities plus the Galilean shift ``(cu, cv)``; 2-D arrays, zero on the outer rim. Local."""
surface_momentum.register("cuda", lambda *a: gpukernels.surface_momentum(*a),
                          lambda xp, u, v, cu, cv, us2, vmin: us2 > 0 and cuda_arrays(u, v))

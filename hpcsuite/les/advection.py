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

The operators (face velocities, one field's tendency, several scalars' at once) are in
:mod:`hpcsuite.les.ops.advection`, with their array-API reference and the numba and CUDA kernels
registered for them; the term here calls them and never chooses.
"""
from __future__ import annotations

from .ops import advection as ops
from .ops.advection import SCHEMES
from .ops.common import zeros

__all__ = ["Advection", "SCHEMES", "advect", "face_velocities", "zeros"]


def face_velocities(ctx, name: str):
    """``(Vx, Vy, Vz)``: the velocities that advect field ``name`` through the faces around the
    interior cells (see :func:`advect`); views of the fields for scalars, new arrays for momentum
    (the operator :data:`hpcsuite.les.ops.advection.face_velocities`). Local."""
    g, zg = ctx.grid, ctx.zgrid
    f = ctx.fields
    u, v, w = f["u"], f["v"], f["w"]
    if name in ("u", "v", "w"):
        return ops.face_velocities(ctx.xp, name, u, v, w, g.h, g.nxl, g.nyl, zg.wlo, zg.whi)
    h, nxl, nyl = g.h, g.nxl, g.nyl
    I, J = slice(h, h + nxl), slice(h, h + nyl)
    return u[h:h + nxl + 1, J, ...], v[I, h:h + nyl + 1, ...], w[I, J, ...]


def advect(ctx, name: str, scheme: str) -> None:
    """Add the advective tendency of field ``name`` with ``scheme`` to ``ctx.tend[name]``. Local
    (halos of u, v, w and the field must be valid)."""
    g, zg = ctx.grid, ctx.zgrid
    Vx, Vy, Vz = face_velocities(ctx, name)
    if name == "w":
        ops.advect_into(ctx.xp, ctx.tend[name], ctx.fields[name], Vx, Vy, Vz, g.h, scheme, g.dx, g.dy,
                        zg.rdzh, None)
    else:
        ops.advect_into(ctx.xp, ctx.tend[name], ctx.fields[name], Vx, Vy, Vz, g.h, scheme, g.dx, g.dy,
                        zg.rdzf, (zg.wlo, zg.whi))


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
        for name in ("u", "v", "w"):
            if name in ctx.fields:
                advect(ctx, name, self.scheme(name))
        scalars = [n for n in ctx.fields if n not in ("u", "v", "w")]
        if scalars:                              # (on a GPU: one launch for all of them)
            zg, g = ctx.zgrid, ctx.grid
            Vx, Vy, Vz = face_velocities(ctx, scalars[0])           # (views of u, v, w)
            ops.advect_many_into(ctx.xp, [ctx.tend[n] for n in scalars], [ctx.fields[n] for n in scalars],
                                 Vx, Vy, Vz, g.h, [self.scheme(n) for n in scalars], g.dx, g.dy, zg.rdzf,
                                 (zg.wlo, zg.whi))

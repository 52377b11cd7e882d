"""Pressure projection: make the velocity at the end of each Runge-Kutta substep divergence-free.

A substep sets ``u_new = u_start + dt_sub * tend`` (``u_start``: the fields at the start of the RK3
step). With ``tend`` holding every other tendency, this term solves ``L p = div(u_start / dt_sub +
tend)`` with :class:`hpcsuite.solvers.poisson.PoissonFFT` and subtracts ``grad p`` from the momentum
tendencies (as DALES ``poisson``), so that the discrete divergence of ``u_new`` vanishes to rounding.
``p`` is the kinematic pressure (``p' / rho0``); it is left in ``ctx.diag['p']`` (one array, rewritten
by every call).

The divergence and gradient are the staggered 2nd-order differences that ``L`` is built from:
``div`` at cell centres from the faces ``i`` and ``i + 1``, ``grad`` at the faces from the centres
``i - 1`` and ``i`` (and ``dzh`` between layers); no flux through the surface and the lid.
"""
from __future__ import annotations

from ..solvers.poisson import PoissonFFT
from .ops import dynamics as ops

__all__ = ["PressureProjection", "divergence"]


def divergence(u, v, w, g, zg):
    """Discrete divergence on the interior cells (needs the east/north halo of u and v). Local."""
    return ops.divergence(u, v, w, g.h, g.nxl, g.nyl, g.dx, g.dy, zg.rdzf)


class PressureProjection:
    """The pressure term (last in a substep). Creating one is collective over ``team``.

    Parameters
    ----------
    grid : Grid
        This rank's block of the grid.
    team : Team
        The ranks.
    dims : (int, int)
        The process grid of the fields.
    device : {"cpu", "gpu"}
        Where the fields live.
    xp : module
        Their array namespace.
    """

    def __init__(self, grid, team, dims, device: str = "cpu", xp=None):
        self.solver = PoissonFFT((grid.nx, grid.ny, grid.nz), grid.dx, grid.dy, grid.dzf, grid.dzh, team,
                                 dims, device=device, xp=xp)
        self._p = None

    def __call__(self, ctx) -> None:
        """Project ``ctx.tend`` so the substep's velocity is divergence-free. Collective (three
        halo exchanges and the solver's transposes)."""
        xp, g, zg = ctx.xp, ctx.grid, ctx.zgrid
        h = g.h
        I, J = g.interior
        tu, tv, tw = ctx.tend["u"], ctx.tend["v"], ctx.tend["w"]
        s = ctx.start
        rdt = 1.0 / ctx.dt
        ctx.update_halo(tu, tv)
        rhs = ops.projection_rhs(xp, (tu, tv, tw), (s["u"], s["v"], s["w"]) if s else None, rdt, h, g.nxl, g.nyl,
                                 g.dx, g.dy, zg.rdzf)       # (w's tendency at the walls set to zero)
        # a cell-type array (nz levels) kept from call to call: its interior is written here and its
        # halo (x and y only: the whole rest of it) by the update below
        p = self._p
        if p is None or type(p) is not type(tu) or p.shape != tu.shape or p.dtype != tu.dtype:
            p = self._p = xp.zeros_like(tu)
        p[I, J, :] = self.solver.solve(rhs)
        ctx.update_halo(p)
        ops.subtract_gradient(tu, tv, tw, p, h, g.nxl, g.nyl, g.dx, g.dy, zg.rdzh)
        ctx.diag["p"] = p

    def free(self) -> None:
        """Release the solver's arrays. Collective."""
        self.solver.free()

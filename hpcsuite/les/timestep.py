"""Time stepping: Wicker-Skamarock RK3, the adaptive time step, and blow-up detection.

RK3 (Wicker and Skamarock 2002, as DALES): from the fields ``phi_n`` at the start of a step,

    phi_1 = phi_n + dt/3 f(phi_n),   phi_2 = phi_n + dt/2 f(phi_1),   phi_n+1 = phi_n + dt f(phi_2)

The step ``dt`` is chosen at the start of each step from the largest Courant number
``dt max(|u|/dx + |v|/dy + |w|/dzh)`` (velocities in the Galilean-shifted frame) and the largest
diffusion number ``dt max(K) (1/dx^2 + 1/dy^2 + 1/dzmin^2)`` over the whole domain: one
``MPI_Allreduce`` (max) of three numbers per step, which also carries a "non-finite value seen" flag
so that a blow-up is noticed by every rank at the same step.
"""
from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from ..runtime.device import to_host
from .ops import dynamics as ops
from .ops.dynamics import whole_max  # noqa: F401  (the model takes it from here)

__all__ = ["RK3", "RK3_TIMES", "TimeStepper", "BlowUp", "local_rates", "local_values", "COURANT_LIMIT",
           "DIFFUSION_LIMIT"]

#: Substep coefficients and the substep start times (fractions of dt).
RK3 = (1.0 / 3.0, 0.5, 1.0)
RK3_TIMES = (0.0, 1.0 / 3.0, 0.5)
#: Linear stability limits of RK3: Courant number (2nd-order central: sqrt(3); 5th-order upwind ~1.4)
#: and diffusion number dt K sum(1/h^2) (2nd-order diffusion: 2.51 / 4).
COURANT_LIMIT = {"2nd": 1.7, "5th": 1.4}
DIFFUSION_LIMIT = 0.6


class BlowUp(RuntimeError):
    """The run became unstable: non-finite values or a Courant number far beyond the limit. The
    message (the same on every rank) names the time, the variable and the location."""


def local_rates(ctx, probe=None):
    """``(courant rate, sum of every field)`` over this rank's interior: ``max(|u|/dx + |v|/dy +
    |w|/dzh)`` (multiply by dt for the Courant number) and a sum that is non-finite when any field
    holds a NaN or infinity. Device scalars. Local.

    ``probe``: a 2-D array holding the values of every field (halos included, which copy other
    interiors; e.g. the model's start-of-step buffer): its sum replaces the per-field sums.
    """
    xp, g, zg = ctx.xp, ctx.grid, ctx.zgrid
    I, J = g.interior
    f = ctx.fields
    rate = ops.courant_rate(xp, f["u"], f["v"], f["w"], zg.rdzh, g.h, g.nxl, g.nyl, g.dx, g.dy)
    if probe is not None:
        total = xp.sum(xp.sum(probe, axis=-1))
    else:
        total = sum(xp.sum(xp.sum(a[I, J, ...], axis=-1)) for a in f.values())
    return rate, total


def local_values(ctx, k_parts, probe=None):
    """:func:`local_rates` and the diffusivity maxima ``k_parts`` (device scalars) in one 1-D device
    array ``[rate, sum, *k_parts]`` (what :meth:`TimeStepper.rates` brings to the host; its
    ``values``): all device work, no transfer, so a CUDA graph can hold it. Local."""
    xp = ctx.xp
    rate, total = local_rates(ctx, probe)
    return xp.stack([xp.reshape(v, ()) for v in (rate, total, *k_parts)])


def host_floats(xp, values) -> list[float]:
    """``[float(v) for v in values]`` for device scalars, in one device-to-host transfer on CuPy
    (one small stack, then one copy, instead of one synchronising copy per value). Local."""
    if len(values) > 1 and type(values[0]).__module__.split(".")[0] == "cupy":
        return [float(v) for v in xp.stack([xp.reshape(v, ()) for v in values]).get()]
    return [float(v) for v in values]


class TimeStepper:
    """Chooses ``dt`` each step. Local construction; :meth:`rates` is collective.

    Parameters
    ----------
    courant : float
        Target Courant number of the adaptive step.
    peclet : float
        Target diffusion number of the adaptive step.
    dt_max : float
        Largest step.
    dt_fixed : float or None
        A fixed step instead (checked against the limits before the run by the app).
    blowup_courant : float
        A Courant number above this (with the step actually taken) stops the run.
    """

    def __init__(self, courant: float = 0.7, peclet: float = 0.3, dt_max: float = math.inf,
                 dt_fixed: float | None = None, blowup_courant: float = 3.0):
        self.courant, self.peclet, self.dt_max = courant, peclet, dt_max
        self.dt_fixed, self.blowup_courant = dt_fixed, blowup_courant

    @staticmethod
    def diffusion_rate(grid, k_max: float) -> float:
        """``K (1/dx^2 + 1/dy^2 + 1/dzmin^2)`` for the largest diffusivity ``k_max``. Local."""
        return k_max * (1.0 / grid.dx ** 2 + 1.0 / grid.dy ** 2 + 1.0 / float(np.min(grid.dzf)) ** 2)

    def rates(self, ctx, k_max, probe=None, values=None) -> tuple[float, float, bool]:
        """``(courant rate, diffusion rate, any non-finite)`` over all ranks (``probe``: see
        :func:`local_rates`). Collective (one allreduce of three numbers).

        ``k_max``: this rank's largest diffusivity, a float, or ``(floor, device scalars)``: the
        largest of ``floor`` and the scalars (brought to the host with the rates, one transfer).
        ``values``: the 1-D device array of :func:`local_values` made already (e.g. by a CUDA
        graph): then only ``k_max``'s floor is used, and this rank's part is one copy to the host.
        """
        floor, parts = (k_max, ()) if isinstance(k_max, (int, float)) else (float(k_max[0]), tuple(k_max[1]))
        if values is None:
            rate, total = local_rates(ctx, probe)
            rate, total, *ks = host_floats(ctx.xp, (rate, total, *parts))
        else:
            rate, total, *ks = (float(v) for v in to_host(values))
        k_max = max(floor, max(ks)) if ks else floor
        bad = not (math.isfinite(rate) and math.isfinite(total))
        buf = np.array([rate if math.isfinite(rate) else 0.0, self.diffusion_rate(ctx.grid, k_max),
                        float(bad)])
        ctx.team.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        return float(buf[0]), float(buf[1]), bool(buf[2])

    def choose(self, courant_rate: float, diffusion_rate: float) -> float:
        """The step for these rates (the fixed one, or the adaptive limit). Local."""
        if self.dt_fixed:
            return self.dt_fixed
        dt = self.dt_max
        if courant_rate > 0:
            dt = min(dt, self.courant / courant_rate)
        if diffusion_rate > 0:
            dt = min(dt, self.peclet / diffusion_rate)
        if not math.isfinite(dt):
            raise ValueError("the adaptive time step is unbounded (no flow, no diffusion): set dt_max")
        return dt


def locate_blowup(ctx, t: float, dt: float, limit: float, bad: bool) -> str:
    """The message for a blow-up at time ``t``: the first non-finite value (variable, global cell)
    or the largest Courant number with the step ``dt``. Collective (an allgather)."""
    xp, g, zg = ctx.xp, ctx.grid, ctx.zgrid
    I, J = g.interior
    found = None
    if bad:
        for name, a in ctx.fields.items():
            ok = np.asarray(to_host(xp.isfinite(a[I, J, ...])))
            if not ok.all():
                i, j, k = (int(x) for x in np.argwhere(~ok)[0])
                found = (math.inf, f"{name} is {to_host(a[I, J, ...])[i, j, k]} at cell (i, j, k) = "
                         f"({g.i0 + i}, {g.j0 + j}, {k}), z = {_zof(g, name, k):.4g}")
                break
        if found is None:                    # every value finite, but so large that the sums overflow
            for name, a in ctx.fields.items():
                v = np.abs(np.asarray(to_host(a[I, J, ...])))
                if v.size:
                    i, j, k = np.unravel_index(int(np.argmax(v)), v.shape)
                    if found is None or v[i, j, k] > found[0]:
                        found = (float(v[i, j, k]), f"{name} is {to_host(a[I, J, ...])[i, j, k]:.4g} at cell "
                                 f"(i, j, k) = ({g.i0 + i}, {g.j0 + j}, {k}), z = {_zof(g, name, k):.4g} "
                                 "(its largest magnitude: the sums overflow)")
    else:
        f = ctx.fields
        c = (xp.abs(f["u"][I, J, ...]) / g.dx + xp.abs(f["v"][I, J, ...]) / g.dy
             + xp.abs(f["w"][I, J, 1:]) * zg.rdzh[1:]) * dt
        c = np.asarray(to_host(c))
        i, j, k = np.unravel_index(int(np.argmax(c)), c.shape)
        vals = ", ".join(f"{n} = {float(to_host(f[n][I, J])[i, j, k]):.4g}" for n in "uvw")
        found = (float(c[i, j, k]), f"Courant number {c[i, j, k]:.3g} (above {limit:g}) at cell (i, j, k) = "
                 f"({g.i0 + i}, {g.j0 + j}, {k}), z = {g.zf[k]:.4g}: {vals}")
    every = ctx.team.allgather(found)
    cands = [x for x in every if x is not None]
    # the first rank's non-finite value (every rank would report a different first one), else the largest
    best = next((x for x in cands if x[0] == math.inf), None) or max(cands, key=lambda x: x[0])
    return f"the run blew up at t = {t:.6g} (dt = {dt:.4g}): {best[1]}"


def _zof(g, name: str, k: int) -> float:
    return float(g.zh[k] if name == "w" else g.zf[min(k, g.nz - 1)])

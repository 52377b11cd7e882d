"""Verification set-ups for the LES dynamics tests: exact solutions written out here, independently
of the model, and a driver that runs the real model (FieldStore, terms, RK3, projection)."""
import math

import numpy as np

from hpcsuite.les.advection import Advection
from hpcsuite.les.grid import Grid
from hpcsuite.les.model import build
from hpcsuite.les.subgrid import ConstantViscosity
from hpcsuite.les.timestep import TimeStepper
from lesref import gather, put_global, stretched_zh


def taylor_green(n, nu, t):
    """Exact u, v (w = 0) of the 2-D Taylor-Green vortex on the staggered points of an n x n
    grid over [0, 2 pi)^2 (u on x faces, v on y faces)."""
    d = 2 * math.pi / n
    xc, xf = (np.arange(n) + 0.5) * d, np.arange(n) * d
    e = math.exp(-2 * nu * t)
    u = np.cos(xf)[:, None] * np.sin(xc)[None, :] * e
    v = -np.sin(xc)[:, None] * np.cos(xf)[None, :] * e
    return u, v


def sine(n, k, U, kappa, t):
    """c = sin(k (x - U t)) exp(-kappa k^2 t) at the cell centres of n cells over [0, 2 pi)."""
    x = (np.arange(n) + 0.5) * 2 * math.pi / n
    return np.sin(k * (x - U * t)) * math.exp(-kappa * k * k * t)


def run_taylor_green(team, n, nz=2, nu=0.05, t_end=0.5, scheme="2nd", dims=(0, 0), courant=0.5):
    g = Grid.uniform(n, n, nz, 2 * math.pi, 2 * math.pi, 1.0)
    m = build(g, team, ["u", "v", "w"], Advection(default=scheme), after=[ConstantViscosity(nu)],
              dims=dims, stepper=TimeStepper(courant=courant), k_const=nu)
    u, v = taylor_green(n, nu, 0.0)
    put_global(m.ctx.fields["u"], m.ctx.grid, np.repeat(u[:, :, None], nz, 2))
    put_global(m.ctx.fields["v"], m.ctx.grid, np.repeat(v[:, :, None], nz, 2))
    advance(m, t_end)
    out = {f: gather(team, m.ctx.grid, m.ctx.fields[f]) for f in "uvw"}
    m.free()
    return out, taylor_green(n, nu, t_end)


def run_sine(team, n, scheme, U=1.0, kappa=0.0, k=1, t_end=1.0, dt=None, ny=4, nz=2):
    g = Grid.uniform(n, ny, nz, 2 * math.pi, ny * 2 * math.pi / n, 1.0)
    after = [ConstantViscosity(0.0, kappa)] if kappa else []
    st = TimeStepper(dt_fixed=dt) if dt else TimeStepper(courant=0.5)
    m = build(g, team, ["u", "v", "w", "thl"], Advection(default=scheme), after=after, stepper=st,
              k_const=kappa)
    m.ctx.fields["u"][...] = U
    c0 = sine(n, k, U, kappa, 0.0)
    put_global(m.ctx.fields["thl"], m.ctx.grid, np.broadcast_to(c0[:, None, None], (n, ny, nz)))
    advance(m, t_end)
    c = gather(team, m.ctx.grid, m.ctx.fields["thl"])
    m.free()
    return c, sine(n, k, U, kappa, t_end)


def advance(m, t_end):
    m.update_halos()
    while m.t < t_end * (1 - 1e-14):
        m.step(cap=t_end - m.t)


def order(errors, ratio=2.0):
    return [math.log(errors[i] / errors[i + 1], ratio) for i in range(len(errors) - 1)]


def small_case(team, steps=4, dims=(0, 0), device="cpu"):
    """A 3-D case with every part active: random smooth-ish fields, 5th-order momentum, 2nd-order
    scalars, constant viscosity, stretched grid; returns the gathered fields after a few steps."""
    g = Grid.stretched(16, 12, 1.6, 1.2, stretched_zh(5, 1.0))
    m = build(g, team, ["u", "v", "w", "thl", "qt"], Advection({"thl": "2nd", "qt": "5th"}, default="5th"),
              after=[ConstantViscosity(1e-3, 2e-3)], dims=dims, device=device, stepper=TimeStepper(courant=0.6),
              k_const=2e-3)
    rng = np.random.default_rng(11)
    for n, f in m.ctx.fields.items():
        glob = rng.standard_normal((16, 12, f.shape[2]))
        if n == "w":
            glob[..., 0] = glob[..., -1] = 0.0
        host = np.empty(f.shape)
        put_global(host, m.ctx.grid, glob)
        f[...] = m.ctx.xp.asarray(host)
    m.update_halos()
    for _ in range(steps):
        m.step()
    out = {n: gather(team, m.ctx.grid, f.get() if hasattr(f, "get") else f) for n, f in m.ctx.fields.items()}
    out["t"] = m.t
    m.free()
    return out, g

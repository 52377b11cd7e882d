"""heat3d: the 3-D heat equation, explicit in time, periodic, verified against its exact solution.

    du/dt = alpha * laplacian(u)   on [0, lx) x [0, ly) x [0, lz), periodic

started from a sum of plane sine waves ``a * sin(2 pi (kx x / lx + ky y / ly + kz z / lz))``, each of
which decays exactly as ``exp(-alpha |kappa|^2 t)``. Second-order central differences (7-point
stencil) on a cell-centred grid, forward Euler in time with ``dt`` below the stability limit, a
Cartesian decomposition over all ranks: the field is a ``pgas.DistArray`` (BLOCKED in x, y
and z) whose one-cell periodic halo is exchanged every step. At the end it
prints the error against the exact solution and writes the field with parallel HDF5.

Run: ``mpiexec -n 4 hpcsuite run inputs/heat3d.toml`` (or ``python apps/heat3d.py DECK``).
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np

from hpcsuite import deck as dk
from hpcsuite.runtime.h5io import write_blocks_hdf5
from hpcsuite import pgas
from hpcsuite.runtime import Timers, grid_shape

NAME = "heat3d"
SUMMARY = "3-D heat equation (explicit, periodic, halo exchange), checked against the exact decay"

SCHEMA = dk.Schema({
    "app": {
        "name": dk.Str(help="the application: heat3d"),
        "device": dk.Choice(default="cpu", choices=("cpu",), help="where arrays live (GPU comes with the stencil solver)"),
    },
    "grid": {
        "nx": dk.Int(min=1, help="cells along x"),
        "ny": dk.Int(min=1, help="cells along y"),
        "nz": dk.Int(min=1, help="cells along z"),
        "lx": dk.Float(default=1.0, gt=0, help="domain length along x"),
        "ly": dk.Float(default=1.0, gt=0, help="domain length along y"),
        "lz": dk.Float(default=1.0, gt=0, help="domain length along z"),
    },
    "physics": {
        "alpha": dk.Float(default=1.0, gt=0, help="diffusivity"),
    },
    "time": {
        "t_end": dk.Float(gt=0, help="simulated time to reach"),
        "dt": dk.Float(default=0.0, ge=0, help="time step; 0 = safety * stability limit"),
        "safety": dk.Float(default=0.9, gt=0, le=1, help="fraction of the stability limit when dt = 0"),
    },
    "initial": {
        "modes": dk.Modes(default=[[1, 1, 1, 1.0]], help="[kx, ky, kz, amplitude] plane sine waves"),
    },
    "decomposition": {
        "dims": dk.IntList(default=[0, 0, 0], length=3, min=0, help="ranks along x, y, z; 0 = choose"),
    },
    "output": {
        "file": dk.Str(default="heat3d.h5", help="HDF5 file for the final field; \"\" = none"),
    },
}, doc={"app": "which application", "grid": "cells and domain size", "time": "explicit Euler stepping",
        "initial": "sum of plane sine waves", "decomposition": "process grid", "output": "results"})


def stability_limit(deck) -> float:
    """Largest stable forward-Euler step: ``1 / (2 alpha sum(1/h_d^2))``."""
    g = deck.grid
    inv_h2 = sum((n / length) ** 2 for n, length in ((g.nx, g.lx), (g.ny, g.ly), (g.nz, g.lz)))
    return 1.0 / (2.0 * deck.physics.alpha * inv_h2)


def check(deck, team) -> None:
    """Cross-key checks that need the team size: process grid, cells per rank, stability."""
    n = (deck.grid.nx, deck.grid.ny, deck.grid.nz)
    try:
        dims = grid_shape(team.size, deck.decomposition.dims)
    except ValueError as exc:
        raise deck.fail("decomposition", "dims", f"{deck.decomposition.dims} does not fit {team.size} "
                        f"ranks ({exc})")
    for ax, (cells, ranks) in enumerate(zip(n, dims)):
        if ranks > cells:
            raise deck.fail("grid", f"n{'xyz'[ax]}",
                            f"= {cells} is smaller than the {ranks} ranks along {'xyz'[ax]} of the "
                            f"{'x'.join(map(str, dims))} process grid; use more cells or fewer ranks")
    limit = stability_limit(deck)
    if deck.time.dt > limit:
        raise deck.fail("time", "dt", f"= {deck.time.dt:g} is above the stability limit {limit:.4g} for "
                        f"this grid and alpha (dt <= 1 / (2 alpha (1/dx^2 + 1/dy^2 + 1/dz^2)))")


def exact(deck, coords, t: float) -> np.ndarray:
    """The exact solution at time ``t`` on the cell centres given by ``coords`` (x, y, z arrays)."""
    g, alpha = deck.grid, deck.physics.alpha
    x, y, z = np.meshgrid(*coords, indexing="ij", sparse=True)
    u = np.zeros(np.broadcast_shapes(x.shape, y.shape, z.shape))
    for kx, ky, kz, amp in deck.initial.modes:
        kap = (2 * math.pi * kx / g.lx, 2 * math.pi * ky / g.ly, 2 * math.pi * kz / g.lz)
        decay = math.exp(-alpha * sum(k * k for k in kap) * t)
        u += amp * decay * np.sin(kap[0] * x + kap[1] * y + kap[2] * z)
    return u


def step(u: np.ndarray, out: np.ndarray, tmp: np.ndarray, c: tuple[float, float, float]) -> None:
    """One explicit Euler step of the 7-point Laplacian: ``out = u + sum_d c_d (u_+ - 2 u + u_-)``
    on the interior, with ``c_d = alpha dt / h_d^2``. In-place ufuncs, no temporaries per term."""
    core = u[1:-1, 1:-1, 1:-1]
    np.multiply(core, 1.0 - 2.0 * sum(c), out=out)
    for ax, cd in enumerate(c):
        hi = [slice(1, -1)] * 3
        lo = [slice(1, -1)] * 3
        hi[ax], lo[ax] = slice(2, None), slice(None, -2)
        np.add(u[tuple(hi)], u[tuple(lo)], out=tmp)
        tmp *= cd
        out += tmp


class Result:
    """What :func:`simulate` returns on every rank: the local block and the global error norms."""

    def __init__(self, field, starts, steps, dt, error_max, error_l2_rel, timers, grid):
        self.field, self.starts, self.steps, self.dt = field, starts, steps, dt
        self.error_max, self.error_l2_rel, self.timers, self.grid = error_max, error_l2_rel, timers, grid


def simulate(deck, team, progress=None) -> Result:
    """Run the heat equation described by ``deck`` on ``team``. Collective.

    Returns this rank's block of the final field (without halo) and the error norms against the
    exact solution, reduced over all ranks.
    """
    g = deck.grid
    n, lengths = (g.nx, g.ny, g.nz), (g.lx, g.ly, g.lz)
    # the field lives in a PGAS array, blocked in all three dimensions, with a periodic
    # one-cell halo (faces only: the 7-point stencil needs no edges or corners)
    u = pgas.zeros(n, dist=(pgas.BLOCKED,) * 3, team=team, grid=deck.decomposition.dims,
                   halo=1, boundary="periodic")
    h = [lengths[d] / n[d] for d in range(3)]
    coords = [(np.arange(s.start, s.stop) + 0.5) * h[d] for d, s in enumerate(u.local_slices)]

    steps, dt = steps_and_dt(deck)
    c = tuple(deck.physics.alpha * dt / hd ** 2 for hd in h)
    u.local[...] = exact(deck, coords, 0.0)
    padded = u.local_with_halo
    new, tmp = np.empty(u.local.shape), np.empty(u.local.shape)
    timers = Timers()
    for it in range(steps):
        with timers("halo"):
            u.halo.update()
        with timers("stencil"):
            step(padded, new, tmp, c)
            u.local[...] = new
        if progress is not None:
            progress.update(1, t=(it + 1) * dt)

    field = u.local.copy()
    ref = exact(deck, coords, deck.time.t_end)
    err = field - ref
    from mpi4py import MPI
    sums = np.array([np.sum(err * err), np.sum(ref * ref)])
    emax = np.array([np.max(np.abs(err)) if err.size else 0.0])
    team.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    team.Allreduce(MPI.IN_PLACE, emax, op=MPI.MAX)
    rel_l2 = math.sqrt(sums[0] / sums[1]) if sums[1] > 0 else math.sqrt(sums[0])
    starts = tuple(s.start for s in u.local_slices)
    grid_dims = u.grid
    u.free()
    return Result(field, starts, steps, dt, float(emax[0]), rel_l2, timers, grid_dims)


def steps_and_dt(deck) -> tuple[int, float]:
    """The number of steps and the step actually used (``t_end`` is hit exactly)."""
    dt = deck.time.dt or deck.time.safety * stability_limit(deck)
    steps = max(1, math.ceil(deck.time.t_end / dt * (1 - 1e-12)))
    return steps, deck.time.t_end / steps


def run(deck, ctx) -> int:
    team, log = ctx.team, ctx.log
    g = deck.grid
    n = (g.nx, g.ny, g.nz)
    steps, dt = steps_and_dt(deck)
    log.info(f"{n[0]}x{n[1]}x{n[2]} cells on {team.size} rank(s); {steps} steps of dt = {dt:.4g} "
             f"to t = {deck.time.t_end:g}")
    t0 = time.perf_counter()
    with log.progress(steps, unit="step") as bar:
        res = simulate(deck, team, bar)
    wall = time.perf_counter() - t0
    summary = res.timers.summary(team)
    log.info(f"process grid {'x'.join(map(str, res.grid))}; {wall:.3f} s for {steps} steps "
             f"({steps * math.prod(n) / wall / 1e6:.1f} M cell updates/s; halo {summary['halo']['max']:.3f} s, "
             f"stencil {summary['stencil']['max']:.3f} s, slowest rank)")
    log.result(f"error at t = {deck.time.t_end:g}: max |u - exact| = {res.error_max:.6e}, "
               f"relative L2 = {res.error_l2_rel:.6e}")
    if deck.output.file:
        attrs = {"t": deck.time.t_end, "steps": steps, "dt": dt, "alpha": deck.physics.alpha,
                 "lengths": np.array((g.lx, g.ly, g.lz)), "error_max": res.error_max,
                 "error_l2_rel": res.error_l2_rel, "ranks": team.size,
                 "process_grid": np.array(res.grid)}
        write_blocks_hdf5(deck.output.file, team, n, res.starts, {"u": res.field}, attrs)
        log.info(f"wrote {deck.output.file} (dataset 'u', shape {n})")
    return 0


if __name__ == "__main__":
    from hpcsuite.apprunner import main_for_app
    sys.exit(main_for_app(NAME))

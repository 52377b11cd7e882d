"""heat3d: the 3-D heat equation, explicit in time, periodic, verified against its exact solution.

    du/dt = alpha * laplacian(u)   on [0, lx) x [0, ly) x [0, lz), periodic

started from a sum of plane sine waves ``a * sin(2 pi (kx x / lx + ky y / ly + kz z / lz))``, each of
which decays exactly as ``exp(-alpha |kappa|^2 t)``. Second-order central differences (7-point
stencil) on a cell-centred grid, forward Euler in time with ``dt`` below the stability limit, a
Cartesian decomposition over all ranks: :class:`hpcsuite.solvers.StencilSolver` steps a
``pgas.DistArray`` (BLOCKED in x, y and z) with a fused kernel, exchanging a ``depth``-cell periodic
halo every ``depth`` steps (``[solver] depth``; 0 = chosen by timing) on the CPU (numba), the GPU
(CuPy) or the strict array-API checker (``[solver] backend``). On the CPU the steps between two
exchanges are taken ``block`` at a time by a temporally blocked kernel that keeps them in the
caches (``[solver] block``; 0 = 1 or the depth, chosen by timing with the tile width; identical
results either way). At the end it prints the error
against the exact solution and writes the field with parallel HDF5.

Run: ``mpiexec -n 4 hpcsuite run inputs/heat3d.toml`` (or ``python apps/heat3d.py DECK``).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from hpcsuite import deck as dk
from hpcsuite import pgas
from hpcsuite.runtime import (EXIT_CHECKPOINTED, CheckpointRequest, InputError, Timers, gpu_status,
                              grid_shape)
from hpcsuite.runtime.h5io import write_blocks_hdf5
from hpcsuite.solvers import StencilSolver, heat_coeffs

NAME = "heat3d"
PARALLEL_HDF5 = True          # its output is written by every rank (runtime.h5io)
SUMMARY = "3-D heat equation (explicit, periodic, halo exchange), checked against the exact decay"

SCHEMA = dk.Schema({
    "app": {
        "name": dk.Str(help="the application: heat3d"),
        "device": dk.Choice(default="cpu", choices=("cpu", "gpu"), help="where arrays live"),
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
    "solver": {
        "depth": dk.Int(default=0, min=0, help="halo depth k: exchange a k-cell halo once every k steps; "
                        "0 = pick k in 1, 2, 4, 8 by timing a few steps"),
        "block": dk.Int(default=0, min=0, help="temporal blocking (CPU): steps per cache-blocked pass, at "
                        "most depth; 1 = one sweep over memory per step; 0 = 1 or the depth, by timing"),
        "backend": dk.Choice(default="auto", choices=("auto", "cpu", "gpu", "strict"),
                             help="kernels: auto = [app] device, cpu = numba, gpu = CuPy, "
                                  "strict = array-API portability check (slow)"),
    },
    "output": {
        "file": dk.Str(default="heat3d.h5", help="HDF5 file for the final field; \"\" = none"),
        "checkpoint": dk.Str(default="", help="checkpoint file (HDF5); \"\" = no checkpoints. A run that "
                             "finds it continues from it"),
        "checkpoint_every": dk.Int(default=0, min=0, help="also checkpoint every N steps (0 = only when "
                                   "asked: SIGUSR1, e.g. the batch job's time-limit warning)"),
        "check_interval": dk.Int(default=10, min=1, help="steps between checks for a checkpoint request"),
    },
}, doc={"app": "which application", "grid": "cells and domain size", "time": "explicit Euler stepping",
        "initial": "sum of plane sine waves", "decomposition": "process grid",
        "solver": "stencil solver (deep halo, backend)", "output": "results"})


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
    check_solver(deck, n, dims)


def backend_of(deck) -> str:
    """The backend that runs the kernels: ``[solver] backend``, or ``[app] device`` for ``auto``."""
    b = deck.solver.backend
    return deck.app.device if b == "auto" else b


def check_solver(deck, n, dims) -> None:
    """``[solver]`` against the process grid and the device."""
    depth = deck.solver.depth
    smallest = min((cells // ranks, "xyz"[ax]) for ax, (cells, ranks) in enumerate(zip(n, dims)))
    if depth > smallest[0]:
        raise deck.fail("solver", "depth", f"= {depth} is larger than the smallest block ({smallest[0]} cells "
                        f"along {smallest[1]} per rank on the {'x'.join(map(str, dims))} process grid): the "
                        f"halo must come from the next rank alone; use depth <= {smallest[0]} or 0 (auto)")
    block = deck.solver.block
    if block > 1 and depth and block > depth:
        raise deck.fail("solver", "block", f"= {block} is larger than [solver] depth = {depth}: a blocked pass "
                        f"takes at most the steps one halo exchange allows; use block <= {depth} or 0 (auto)")
    device, backend = deck.app.device, deck.solver.backend
    if backend == "gpu" and device != "gpu":
        raise deck.fail("solver", "backend", "= 'gpu' needs [app] device = 'gpu'")
    if backend in ("cpu", "strict") and device == "gpu":
        raise deck.fail("solver", "backend", f"= {backend!r} runs on the CPU, but [app] device = 'gpu'; "
                        "use backend = 'auto' or 'gpu'")
    if device == "gpu":
        ok, why = gpu_status()
        if not ok:
            raise deck.fail("app", "device", f"= 'gpu' but no GPU is usable here: {why}")


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


class Result:
    """What :func:`simulate` returns on every rank: the local block and the global error norms,
    and how the solver ran (halo depth, exchanges, messages sent by this rank)."""

    def __init__(self, field, starts, steps, dt, error_max, error_l2_rel, timers, grid,
                 depth=1, exchanges=0, messages=0, backend="cpu", block=1, tile=None):
        self.field, self.starts, self.steps, self.dt = field, starts, steps, dt
        self.error_max, self.error_l2_rel, self.timers, self.grid = error_max, error_l2_rel, timers, grid
        self.depth, self.exchanges, self.messages, self.backend = depth, exchanges, messages, backend
        self.block, self.tile = block, tile


class _TimeProgress:
    """Shows the simulated time on the progress bar as the solver advances."""

    def __init__(self, bar, dt: float):
        self.bar, self.dt, self.done = bar, dt, 0

    def update(self, n: int) -> None:
        self.done += n
        self.bar.update(n, t=self.done * self.dt)


def simulate(deck, team, progress=None) -> Result:
    """Run the heat equation described by ``deck`` on ``team``. Collective.

    Returns this rank's block of the final field (without halo, on the host) and the error norms
    against the exact solution, reduced over all ranks.
    """
    g = deck.grid
    n, lengths = (g.nx, g.ny, g.nz), (g.lx, g.ly, g.lz)
    h = [lengths[d] / n[d] for d in range(3)]
    steps, dt = steps_and_dt(deck)
    backend = backend_of(deck)
    solver = StencilSolver(n, "7", heat_coeffs(deck.physics.alpha, dt, h), team=team,
                           grid=deck.decomposition.dims, boundary="periodic",
                           depth=deck.solver.depth or "auto", backend=backend,
                           block=deck.solver.block or "auto")

    def initial(slices):
        return exact(deck, [(np.arange(s.start, s.stop) + 0.5) * h[d] for d, s in enumerate(slices)], 0.0)

    timers = Timers(sync=solver.backend.synchronize if backend == "gpu" else None)
    prog = _TimeProgress(progress, dt) if progress is not None else None
    ckpt = deck.output.checkpoint
    u, done = (_restart(ckpt, team, n, deck) if ckpt else (None, 0))
    if progress is not None and done:
        progress.update(done)
    if not ckpt:
        u = solver.run(initial, steps, progress=prog, timers=timers)
    else:
        # advance in segments; between them, agree on whether a checkpoint is due (a requested
        # one ends the run with EXIT_CHECKPOINTED; the job script requeues it)
        req = CheckpointRequest(team, start=done)
        every = deck.output.checkpoint_every
        try:
            while done < steps:
                seg = min(steps - done, deck.output.check_interval)
                if every:
                    seg = min(seg, every - done % every)
                nxt = solver.run(u if u is not None else initial, seg, progress=prog, timers=timers)
                if u is not None:
                    u.free()
                u, done = nxt, done + seg
                asked = req.due(done - 1)
                if done < steps and (asked or (every and done % every == 0)):
                    _save_checkpoint(ckpt, u, done, deck)
                    if asked:
                        u.free()
                        raise Checkpointed(done)
        finally:
            req.close()
    field = np.array(u.device.to_host(u.local))          # a copy: u's memory goes back to the pool
    slices = u.local_slices
    coords = [(np.arange(s.start, s.stop) + 0.5) * h[d] for d, s in enumerate(slices)]
    ref = exact(deck, coords, deck.time.t_end)
    err = field - ref
    from mpi4py import MPI
    sums = np.array([np.sum(err * err), np.sum(ref * ref)])
    emax = np.array([np.max(np.abs(err)) if err.size else 0.0])
    team.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    team.Allreduce(MPI.IN_PLACE, emax, op=MPI.MAX)
    rel_l2 = math.sqrt(sums[0] / sums[1]) if sums[1] > 0 else math.sqrt(sums[0])
    starts = tuple(s.start for s in slices)
    grid_dims = u.grid
    u.free()
    st = solver.stats
    return Result(field, starts, steps, dt, float(emax[0]), rel_l2, timers, grid_dims,
                  depth=st.depth, exchanges=st.exchanges, messages=st.messages, backend=backend,
                  block=st.block, tile=st.tile)


class Checkpointed(Exception):
    """The run stopped after writing a checkpoint at step ``step`` (it will be continued)."""

    def __init__(self, step: int):
        super().__init__(f"checkpoint written at step {step}")
        self.step = step


def _save_checkpoint(path, u, step: int, deck) -> None:
    """The field and the step count, written atomically (collective)."""
    pgas.save_hdf5(u, path, "u", attrs={"step": step, "t_end": deck.time.t_end,
                                        "shape": np.array(u.shape)})


def _restart(path, team, n, deck):
    """``(field, step)`` from a checkpoint if the file exists, else ``(None, 0)``. Collective."""
    exists = team.bcast(Path(path).is_file() if team.rank == 0 else None)
    if not exists:
        return None, 0
    u = pgas.load_hdf5(path, "u", dist=(pgas.BLOCKED,) * 3, team=team)
    if u.shape != n:
        raise InputError(f"{path}: the checkpoint holds a {u.shape} field, the deck asks for {n}")
    import h5py
    step = team.bcast(int(h5py.File(path, "r")["u"].attrs["step"]) if team.rank == 0 else None)
    return u, step


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
    if deck.output.checkpoint and team.bcast(Path(deck.output.checkpoint).is_file() if team.rank == 0 else None):
        log.info(f"continuing from the checkpoint {deck.output.checkpoint}")
    try:
        with log.progress(steps, unit="step") as bar:
            res = simulate(deck, team, bar)
    except Checkpointed as c:
        log.result(f"checkpointed at step {c.step} of {steps} to {deck.output.checkpoint}; run again "
                   f"(the job script requeues) to continue")
        return EXIT_CHECKPOINTED
    wall = time.perf_counter() - t0
    summary = res.timers.summary(team)
    auto = f" (auto, chosen in {summary['tune']['max']:.3f} s)" if "tune" in summary else ""
    blocking = f"temporal block {res.block} (tile {res.tile})" if res.block > 1 else "single sweeps (block 1)"
    log.info(f"process grid {'x'.join(map(str, res.grid))}; backend {res.backend}; halo depth {res.depth}, "
             f"{blocking}{auto}: "
             f"{res.exchanges} exchanges; {wall:.3f} s for {steps} steps "
             f"({steps * math.prod(n) / wall / 1e6:.1f} M cell updates/s; halo {summary['halo']['max']:.3f} s, "
             f"stencil {summary['stencil']['max']:.3f} s, slowest rank)")
    log.result(f"error at t = {deck.time.t_end:g}: max |u - exact| = {res.error_max:.6e}, "
               f"relative L2 = {res.error_l2_rel:.6e}")
    if deck.output.file:
        attrs = {"t": deck.time.t_end, "steps": steps, "dt": dt, "alpha": deck.physics.alpha,
                 "lengths": np.array((g.lx, g.ly, g.lz)), "error_max": res.error_max,
                 "error_l2_rel": res.error_l2_rel, "ranks": team.size,
                 "process_grid": np.array(res.grid), "halo_depth": res.depth, "backend": res.backend,
                 "temporal_block": res.block, "tile": res.tile or 0}
        write_blocks_hdf5(deck.output.file, team, n, res.starts, {"u": res.field}, attrs)
        log.info(f"wrote {deck.output.file} (dataset 'u', shape {n})")
    if deck.output.checkpoint and team.rank == 0:
        Path(deck.output.checkpoint).unlink(missing_ok=True)     # finished: nothing to continue
    team.barrier()
    return 0


"""les: a DALES-style large-eddy simulation (Boussinesq, staggered grid, RK3, FFT pressure solver).

Cases (``[case] kind``):

* ``taylor_green``: the 2-D Taylor-Green vortex extruded in z (w = 0), exact solution
  ``u = U cos(kx x) sin(ky y) e^(-nu k^2 t)``; the final error is printed.
* ``advect_sine``: ``thl = A sin(m 2 pi x / Lx)`` advected by a constant ``u = U`` and diffused
  with ``kappa``; the final error against ``A sin(k (x - U t)) e^(-kappa k^2 t)`` is printed.
* ``cbl``: a dry convective boundary layer heated from below, growing into a stable layer.
* ``bomex``: the BOMEX shallow-cumulus intercomparison case (Siebesma et al. 2003).
* ``dales``: any DALES case from ``prof.inp.NNN`` and ``lscale.inp.NNN`` files.

The fields are distributed in x and y over a 2-D process grid; every part of a step runs on the CPU
(NumPy) or the GPU (CuPy, ``[app] device = "gpu"``) from the same source. Output (``[output] dir``):
``fields.h5`` (the final 3-D fields), ``sections.h5`` (cross-sections), ``stats.h5`` (time series and
hourly mean profiles, moist and dry cases), a checkpoint that a rerun continues from bit-identically
(also written on SIGUSR1, e.g. a batch job's time-limit warning; the run then exits 85).

Run: ``mpiexec -n 4 hpcsuite run inputs/taylor_green.toml``; plots: ``hpcsuite les plot DIR``.

This module reads and checks the deck and runs the loop (steps, outputs, checkpoints); the model
itself (fields and physics terms for the case, initial atmosphere, exact errors, statistics) is
assembled by :mod:`hpcsuite.les.assembly`, and the outputs' restart state is :mod:`hpcsuite.les.restart`.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from hpcsuite import deck as dk
from hpcsuite.les.assembly import (MOIST, case_folder, case_profiles, diffusivities, exact_error, initialise,
                                   make_grid, make_model, make_statistics, scheme_of, velocity_scale)
from hpcsuite.les.restart import load_outputs_state, outputs_state_path, save_outputs_state
from hpcsuite.runtime import EXIT_CHECKPOINTED, EXIT_FAILURE, CheckpointRequest, InputError, Timers, gpu_status

NAME = "les"
PARALLEL_HDF5 = True          # its output is written by every rank (runtime.h5io)
SUMMARY = "DALES-style LES: Taylor-Green, advected sine, dry CBL, BOMEX cumulus; CPU or GPU, 2-D decomposition"

SCHEMES = ("2nd", "5th")
_SCHEME_OR_GROUP = ("",) + SCHEMES

SCHEMA = dk.Schema({
    "app": {
        "name": dk.Str(help="the application: les"),
        "device": dk.Choice(default="cpu", choices=("cpu", "gpu"), help="where the fields live"),
    },
    "case": {
        "kind": dk.Choice(choices=("taylor_green", "advect_sine", "cbl", "bomex", "dales"),
                          help="which case"),
        "amplitude": dk.Float(default=1.0, help="taylor_green: velocity amplitude U; advect_sine: A"),
        "velocity": dk.Float(default=1.0, help="advect_sine: the constant advecting velocity U"),
        "wavenumber": dk.Int(default=1, min=1, help="advect_sine: periods of the sine in x"),
        "folder": dk.Str(default="", help="dales: folder holding prof.inp.NNN and lscale.inp.NNN "
                         "(relative to the deck's folder)"),
        "expnr": dk.Int(default=1, min=0, max=999, help="dales: experiment number NNN"),
        "thl0": dk.Float(default=300.0, gt=0, help="cbl: mixed-layer potential temperature (K)"),
        "zi0": dk.Float(default=200.0, ge=0, help="cbl: initial mixed-layer depth (m)"),
        "gamma": dk.Float(default=0.003, gt=0, help="cbl: lapse rate above it (K/m)"),
        "perturbation": dk.Float(default=0.1, ge=0, help="cbl/bomex/dales: random thl perturbation (K) "
                                 "in the lowest levels"),
        "seed": dk.Int(default=1, min=0, help="seed of the random perturbations"),
    },
    "grid": {
        "nx": dk.Int(min=1, help="cells along x"),
        "ny": dk.Int(min=1, help="cells along y"),
        "nz": dk.Int(min=1, help="cells along z"),
        "xsize": dk.Float(gt=0, help="domain length along x (m)"),
        "ysize": dk.Float(gt=0, help="domain length along y (m)"),
        "zsize": dk.Float(gt=0, help="domain height (m)"),
        "stretch": dk.Float(default=1.0, ge=1.0, le=1.2, help="ratio of consecutive layer thicknesses "
                            "(1 = uniform)"),
    },
    "advection": {
        "momentum": dk.Choice(default="2nd", choices=SCHEMES, help="scheme for u, v, w"),
        "scalars": dk.Choice(default="2nd", choices=SCHEMES, help="scheme for thl, qt, e12"),
        **{v: dk.Choice(default="", choices=_SCHEME_OR_GROUP, help=f"scheme for {v} (\"\" = its group's)")
           for v in ("u", "v", "w", "thl", "qt", "e12")},
    },
    "subgrid": {
        "scheme": dk.Choice(default="constant", choices=("constant", "smagorinsky", "tke", "none"),
                            help="closure: constant viscosity, Smagorinsky, prognostic TKE, none"),
        "nu": dk.Float(default=0.0, ge=0, help="constant: viscosity (m^2/s)"),
        "kappa": dk.Float(default=-1.0, help="constant: scalar diffusivity (m^2/s; < 0 = nu)"),
        "cs": dk.Float(default=0.22, gt=0, help="smagorinsky: constant"),
        "prandtl": dk.Float(default=1.0 / 3.0, gt=0, help="smagorinsky: turbulent Prandtl number"),
    },
    "physics": {
        "th0": dk.Float(default=300.0, gt=0, help="reference potential temperature (K)"),
        "ps": dk.Float(default=101500.0, gt=0, help="surface pressure (Pa)"),
        "lat": dk.Float(default=0.0, ge=-90, le=90, help="latitude for the Coriolis parameter (deg); "
                        "0 = no Coriolis force"),
        "wthl": dk.Float(default=0.0, help="surface kinematic heat flux (K m/s)"),
        "wqt": dk.Float(default=0.0, help="surface kinematic moisture flux (m/s)"),
        "ustar": dk.Float(default=0.0, ge=0, help="surface friction velocity (m/s)"),
        "galilean": dk.Bool(default=False, help="move the domain with the mean wind (Galilean shift)"),
        "sponge_base": dk.Float(default=0.0, ge=0, help="height of the sponge layer's base (m), below the "
                                "highest cell centre; 0 = no sponge (DALES ksp)"),
        "sponge_rate": dk.Float(default=2.75e-3, gt=0, help="sponge: damping rate at the highest cell "
                                "centre (1/s), rising as sin^2 from 0 at the base (DALES rnu0)"),
        "sponge_wind": dk.Choice(default="mean", choices=("mean", "geostrophic"), help="sponge: relax u, v "
                                 "to their slab means or to the geostrophic wind (DALES igrw_damp 1 or 2)"),
    },
    "time": {
        "t_end": dk.Float(gt=0, help="simulated time to reach (s)"),
        "dt": dk.Float(default=0.0, ge=0, help="fixed time step (s); 0 = adaptive"),
        "courant": dk.Float(default=0.7, gt=0, le=1.4, help="adaptive: target Courant number"),
        "peclet": dk.Float(default=0.3, gt=0, le=0.6, help="adaptive: target diffusion number"),
        "dt_max": dk.Float(default=60.0, gt=0, help="adaptive: largest step (s)"),
        "blowup_courant": dk.Float(default=3.0, gt=0, help="stop when the Courant number exceeds this"),
    },
    "decomposition": {
        "dims": dk.IntList(default=[0, 0], length=2, min=0, help="ranks along x, y; 0 = choose"),
    },
    "output": {
        "dir": dk.Str(default="les_out", nonempty=True, help="folder for fields.h5, sections.h5, stats.h5"),
        "fields": dk.Bool(default=True, help="write the final 3-D fields"),
        "sections_every": dk.Float(default=0.0, ge=0, help="seconds between cross-sections (0 = none)"),
        "section_levels": dk.IntList(default=[0], min=0, help="levels k of the x-y cross-sections"),
        "stats_every": dk.Float(default=60.0, ge=0, help="seconds between statistics samples (0 = none)"),
        "checkpoint": dk.Str(default="", help="checkpoint file; \"\" = none. A run that finds it "
                             "continues from it"),
        "checkpoint_every": dk.Int(default=0, min=0, help="also checkpoint every N steps (0 = on SIGUSR1 only)"),
        "check_interval": dk.Int(default=10, min=1, help="steps between checks for a checkpoint request"),
    },
}, doc={"app": "which application", "case": "initial state and forcings", "grid": "cells and domain",
        "advection": "schemes per variable", "subgrid": "subgrid closure", "physics": "constants, surface",
        "time": "RK3 stepping", "decomposition": "process grid", "output": "results and checkpoints"})


# ---------------------------------------------------------------------- the deck
def check(deck, team) -> None:
    """Cross-key checks before the run: process grid and pencils, fixed step against the limits,
    DALES case files, the device. Local (the runner agrees on the outcome over the ranks)."""
    from hpcsuite.les.state import process_grid
    from hpcsuite.les.timestep import COURANT_LIMIT, DIFFUSION_LIMIT, TimeStepper
    from hpcsuite.solvers.poisson import choose_layout
    g = deck.grid
    try:
        dims = process_grid(team.size, g.nx, g.ny, deck.decomposition.dims)
    except ValueError as exc:
        raise deck.fail("decomposition", "dims", f"= {deck.decomposition.dims} does not fit {team.size} "
                        f"rank(s) on the {g.nx}x{g.ny} grid: {exc}")
    try:
        choose_layout((g.nx, g.ny, g.nz), dims)
    except ValueError as exc:
        raise deck.fail("decomposition", "dims", f"= {deck.decomposition.dims}: the pressure solver cannot "
                        f"split the {g.nx}x{g.ny}x{g.nz} grid over the {'x'.join(map(str, dims))} process grid "
                        f"({exc}); use fewer ranks or more cells")
    kind = deck.case.kind
    if kind == "dales":
        if not deck.case.folder:
            raise deck.fail("case", "folder", "is required for kind = 'dales' (the folder with prof.inp.NNN)")
        for stem in ("prof.inp", "lscale.inp"):
            f = case_folder(deck) / f"{stem}.{deck.case.expnr:03d}"
            if not f.is_file():
                raise deck.fail("case", "folder", f"= {deck.case.folder!r} has no {f.name} (needed for "
                                f"expnr = {deck.case.expnr})")
    grid = make_grid(deck)
    if kind in MOIST:
        try:
            case_profiles(deck, grid)
        except InputError as exc:
            raise deck.fail("case", "folder" if kind == "dales" else "kind", str(exc))
    if kind in ("cbl",) + MOIST and deck.subgrid.scheme == "constant" and deck.subgrid.nu == 0:
        pass                                  # allowed (inviscid but for the numerics)
    if deck.time.dt:
        umax, vmax = velocity_scale(deck, grid)
        scheme = "5th" if "5th" in (scheme_of(deck, v) for v in ("u", "v", "w")) else "2nd"
        limit = COURANT_LIMIT[scheme]
        cr = deck.time.dt * (umax / grid.dx + vmax / grid.dy)
        if cr > limit:
            raise deck.fail("time", "dt", f"= {deck.time.dt:g} is above the stability limit: the initial Courant "
                            f"number would be {cr:.3g} > {limit} for {scheme}-order advection "
                            f"(dt <= {limit / (umax / grid.dx + vmax / grid.dy):.4g}); use a smaller dt or 0 "
                            f"(adaptive)")
        k = max(diffusivities(deck))
        d = deck.time.dt * TimeStepper.diffusion_rate(grid, k)
        if d > DIFFUSION_LIMIT:
            raise deck.fail("time", "dt", f"= {deck.time.dt:g} is above the diffusion limit: dt K (1/dx^2 + "
                            f"1/dy^2 + 1/dz^2) = {d:.3g} > {DIFFUSION_LIMIT}")
    elif deck.case.kind == "taylor_green" and deck.case.amplitude == 0 and max(diffusivities(deck)) == 0:
        raise deck.fail("case", "amplitude", "= 0 with nu = 0: nothing moves, set [time] dt")
    p = deck.physics
    if p.sponge_base > 0.0:
        if p.sponge_base >= grid.zf[-1]:
            raise deck.fail("physics", "sponge_base", f"= {p.sponge_base:g} m is not below the highest cell "
                            f"centre ({grid.zf[-1]:g} m): the sponge would damp nothing")
        step = deck.time.dt or deck.time.dt_max
        if p.sponge_rate * step > 1.0:
            raise deck.fail("physics", "sponge_rate", f"= {p.sponge_rate:g} 1/s is too fast for the step: "
                            f"sponge_rate x {'dt' if deck.time.dt else 'dt_max'} = {p.sponge_rate * step:.3g} "
                            f"> 1 (explicit damping); use a smaller rate or step")
    if deck.app.device == "gpu":
        ok, why = gpu_status()
        if not ok:
            raise deck.fail("app", "device", f"= 'gpu' but no GPU is usable here: {why}")


# ---------------------------------------------------------------------- the run
class _Schedule:
    """Output times every ``every`` seconds; ``cap`` limits a step to land on the next one."""

    def __init__(self, every: float, t: float):
        self.every = every
        self.next = (math.floor(t / every + 1e-9) + 1) * every if every > 0 else math.inf

    def due(self, t: float) -> bool:
        if t >= self.next * (1 - 1e-12):
            self.next += self.every
            return True
        return False


def run(deck, ctx) -> int:
    """Run the checked deck to ``[time] t_end`` (or a checkpoint request) and write its outputs;
    return the exit code. Collective."""
    from hpcsuite.les.io import CrossSections, checkpoint_exists, load_checkpoint, save_checkpoint, write_fields
    from hpcsuite.les.timestep import BlowUp
    team, log = ctx.team, ctx.log
    out = Path(deck.output.dir)
    timers = Timers()
    model = make_model(deck, team, timers)
    g = model.ctx.grid
    ckpt = deck.output.checkpoint
    restarted = bool(ckpt) and checkpoint_exists(ckpt, team)
    initialise(deck, model)               # profiles and base state are needed after a restart too
    if restarted:
        load_checkpoint(ckpt, model)
        log.info(f"continuing from the checkpoint {ckpt} at t = {model.t:g} s (step {model.nstep})")
    t_end = deck.time.t_end
    log.info(f"case {deck.case.kind}: {g.nx}x{g.ny}x{g.nz} cells on {team.size} rank(s) "
             f"(process grid {'x'.join(map(str, model.store.dims))}), device {deck.app.device}; "
             f"advection {', '.join(f'{n} {scheme_of(deck, n)}' for n in model.ctx.fields)}; "
             f"subgrid {deck.subgrid.scheme}; to t = {t_end:g} s")
    stats = make_statistics(deck, model)
    sections = (CrossSections(model.store, [n for n in ("w", "thl", "ql", "qt") if n in model.ctx.fields or n == "ql"],
                              deck.output.section_levels, "cloudiest") if deck.output.sections_every else None)
    if restarted and not load_outputs_state(ckpt, model.t, stats, sections, team):
        log.warning(f"{outputs_state_path(ckpt)} is missing or older than the checkpoint: statistics and "
                    f"cross-sections restart empty")
    if stats is not None and not restarted:
        stats.sample(model.ctx, initial=True)          # the initial profiles, for the plots
    s_stats = _Schedule(deck.output.stats_every, model.t) if stats is not None else None
    s_sect = _Schedule(deck.output.sections_every, model.t) if sections is not None else None
    req = CheckpointRequest(team, every=deck.output.check_interval, start=model.nstep)
    every = deck.output.checkpoint_every
    t0 = time.perf_counter()
    steps0 = model.nstep
    try:
        with log.progress(1000, unit="permille") as bar:
            done = int(1000 * model.t / t_end)
            bar.update(done)
            while model.t < t_end * (1 - 1e-12):
                cap = t_end - model.t
                for s in (s_stats, s_sect):
                    if s is not None:
                        cap = min(cap, s.next - model.t)
                model.step(cap=max(cap, 1e-12))
                if s_stats is not None and s_stats.due(model.t):
                    with timers("statistics"):
                        stats.sample(model.ctx)
                if s_sect is not None and s_sect.due(model.t):
                    with timers("output"):
                        sections.sample(model.ctx, model.t)
                now = int(1000 * model.t / t_end)
                if now > done:
                    bar.update(now - done, t=model.t, dt=model.dt_last)
                    done = now
                asked = req.due(model.nstep - 1) if ckpt else False
                if ckpt and model.t < t_end * (1 - 1e-12) and (asked or (every and model.nstep % every == 0)):
                    with timers("checkpoint"):
                        save_outputs_state(ckpt, model.t, stats, sections, team)
                        save_checkpoint(ckpt, model)
                    if asked:
                        log.result(f"checkpointed at t = {model.t:g} s (step {model.nstep}) to {ckpt}; run "
                                   f"again (the job script requeues) to continue")
                        _finish_outputs(deck, model, stats, sections, out)
                        req.close()
                        model.free()
                        return EXIT_CHECKPOINTED
            if done < 1000:
                bar.update(1000 - done, t=model.t, dt=model.dt_last)
    except BlowUp as exc:
        kept = f"; the last good checkpoint {ckpt} is kept" if ckpt and checkpoint_exists(ckpt, team) else ""
        if team.rank == 0:
            sys.stderr.write(f"{NAME}: error: {exc}{kept}\n")
            sys.stderr.flush()
        req.close()
        model.free()
        return EXIT_FAILURE
    req.close()
    wall = time.perf_counter() - t0
    steps = model.nstep - steps0
    summary = timers.summary(team)
    parts = ", ".join(f"{k} {v['max']:.2f} s" for k, v in summary.items())
    cells = g.nx * g.ny * g.nz
    log.info(f"{steps} steps in {wall:.2f} s ({steps * cells / max(wall, 1e-9) / 1e6:.2f} M cell updates/s, "
             f"{steps * cells / max(wall, 1e-9) / team.size / 1e6:.2f} per rank); time per part (slowest "
             f"rank): {parts}")
    errs = exact_error(deck, model)
    if errs is not None:
        log.result(f"error at t = {model.t:g}: " + ", ".join(f"max |{k} - exact| = {v:.6e}" for k, v in errs.items()))
    if deck.output.fields:
        attrs = {"t": model.t, "steps": model.nstep, "case": deck.case.kind}
        attrs.update({f"error_{k}": v for k, v in (errs or {}).items()})
        extra = {n: model.ctx.diag[n] for n in ("ql",) if n in model.ctx.diag}
        write_fields(out / "fields.h5", model.store, attrs=attrs, extra=extra)
        log.info(f"wrote {out / 'fields.h5'} ({', '.join(model.store.names + list(extra))})")
    _finish_outputs(deck, model, stats, sections, out)
    if stats is not None and deck.case.kind == "bomex":
        from hpcsuite.les.cases import bomex_summary
        line = bomex_summary(stats.timeseries())      # None for runs that stop before 6 h
        if line:
            log.result(line)
    if ckpt and team.rank == 0:
        Path(ckpt).unlink(missing_ok=True)             # finished: nothing to continue
        outputs_state_path(ckpt).unlink(missing_ok=True)
    team.barrier()
    model.free()
    return 0


def _finish_outputs(deck, model, stats, sections, out: Path) -> None:
    if stats is not None:
        stats.write(out / "stats.h5", attrs={"case": deck.case.kind})
    if sections is not None:
        sections.write(out / "sections.h5")

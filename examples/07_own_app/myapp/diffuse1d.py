"""Example 7: your own application, registered by entry point (see ../pyproject.toml).

Shows: what an application module defines (NAME, SUMMARY, SCHEMA, check, run) to get hpcsuite's
deck validation (one-line errors on every rank), ``--template``/``--set``, a batch script
(``hpcsuite jobscript diffuse1d``: hpcsuite's generic template; set ``JOBSCRIPT`` to ship your own)
and checkpoint/restart on SIGUSR1: the state goes to HDF5, the run exits 85, the job script
requeues it, and the next run continues from the checkpoint. The physics: explicit 1-D heat
equation on a periodic ``pgas`` array with a halo, checked against the exact discrete decay.

Launch:  pip install -e examples/07_own_app, then
         mpiexec -n 2 hpcsuite run examples/07_own_app/diffuse1d.toml
"""
from pathlib import Path

import numpy as np
from mpi4py import MPI

from hpcsuite import deck as dk, pgas
from hpcsuite.runtime import EXIT_CHECKPOINTED, CheckpointRequest

NAME = "diffuse1d"
SUMMARY = "explicit 1-D heat equation on a PGAS array (an example plug-in application)"
PARALLEL_HDF5 = True                     # refuse to start on several ranks without parallel h5py
SCHEMA = dk.Schema({
    "app": {"name": dk.Str(help="the application: diffuse1d")},
    "grid": {"n": dk.Int(default=256, min=8, help="grid points (periodic)"),
             "steps": dk.Int(default=400, min=1, help="time steps"),
             "r": dk.Float(default=0.25, gt=0, le=0.5, help="nu dt / dx^2 (stable up to 0.5)")},
    "output": {"dir": dk.Str(default="diffuse1d_out", nonempty=True, help="result and checkpoint folder")},
}, doc={"grid": "the problem", "output": "where results go"})


def check(deck, team) -> None:
    """Cross-key checks (every rank, before anything runs)."""
    if deck.grid.n < 4 * team.size:
        raise deck.fail("grid", "n", f"= {deck.grid.n} is too small for {team.size} ranks (>= 4 per rank)")


def run(deck, ctx) -> int:
    team, log, g = ctx.team, ctx.log, deck.grid
    out = Path(deck.output.dir)
    ck = out / "checkpoint.h5"
    if ck.is_file():                                     # restart: read the state back
        u = pgas.load_hdf5(ck, "u", team=team, halo=1, boundary="periodic")
        start = int(team.bcast(_attr(ck, "step") if team.rank == 0 else None))
        log.info(f"continuing from the checkpoint at step {start}")
    else:
        u, start = pgas.zeros((g.n,), team=team, halo=1, boundary="periodic"), 0
        u.local[...] = np.sin(2 * np.pi * u.local_indices[0] / g.n)
        if team.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
    req = CheckpointRequest(team, start=start)
    for step in range(start, g.steps):
        u.halo.update()
        w = u.local_with_halo
        u.local[...] = w[1:-1] + g.r * (w[2:] - 2 * w[1:-1] + w[:-2])
        if step + 1 < g.steps and req.due(step):         # collective: any rank signalled
            pgas.save_hdf5(u, ck, "u", attrs={"step": step + 1})
            log.info(f"checkpointed at step {step + 1}")
            return EXIT_CHECKPOINTED
    pgas.save_hdf5(u, out / "u.h5", "u", attrs={"steps": g.steps})
    exact = (1 - 4 * g.r * np.sin(np.pi / g.n) ** 2) ** g.steps * np.sin(2 * np.pi * u.local_indices[0] / g.n)
    err = team.allreduce(float(np.abs(u.local - exact).max()), op=MPI.MAX)
    log.info(f"diffuse1d on {team.size} ranks: max error vs exact discrete decay {err:.1e}")
    log.info("VERIFIED" if err < 1e-12 else "FAILED")
    if team.rank == 0:
        ck.unlink(missing_ok=True)
    return 0 if err < 1e-12 else 1


def _attr(path, name):
    import h5py
    with h5py.File(path, "r") as f:
        return f["u"].attrs[name]

"""BOMEX with deliberate errors: which checks catch each (issue 21, item 1).

Runs the shipped BOMEX deck (``inputs/bomex.toml``; grid, duration and output changed from the
command line) once correctly and once with each error, at ``--ranks`` MPI ranks, and prints for
each run which checks fail:

* ``compare``: :func:`hpcsuite.les.cases.compare_bomex` over hours 3-6 against the DALES 3.2
  reference run (the ranges of ``hpcsuite.les.cases.BOMEX_REFERENCE``) -- only for runs that
  reach 6 h (``--hours 6``);
* ``physics``: ``check_bomex_physics`` of ``tests/les/test_bomex_physics.py`` (the CI test's checks:
  clouds, cloud base near the LCL, cover/LWP/cloud-fraction ranges, mixed-layer drift) over the
  second hour, on the same run.

The errors (each for its run only; the LES modules are not edited):

``no_subsidence``  the large-scale vertical velocity ``wfls`` set to 0: the case is written as DALES
                   case files (``prof.inp``/``lscale.inp``) and run with ``case.kind = "dales"``;
``no_radiation``   the prescribed radiative cooling ``dthlrad`` set to 0, the same way;
``flux_half``      both surface fluxes halved: ``--set physics.wthl=0.004 physics.wqt=2.6e-5``;
``k_half``         the subgrid diffusivities 2x too small: this script's rank processes replace
                   ``SubgridTKE.closure`` in memory by one that halves the ``ekm`` and ``ekh`` it
                   returns (momentum, scalar and TKE diffusion and the TKE sources all see the
                   halved values) before calling ``hpcsuite.cli.main(["run", ...])``.

    python bench/les_bomex_errors.py --shape 32 32 80 --size 3200 3200 3200 --hours 6
    python bench/les_bomex_errors.py --errors none --seed 2         # the seed noise of the reference
    python bench/les_bomex_errors.py --report DIR                   # re-read finished runs
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "les"))

from hpcsuite import deck as dk  # noqa: E402

ERRORS = ("none", "no_subsidence", "no_radiation", "flux_half", "k_half")


def _halve_diffusivity() -> None:
    """Replace ``SubgridTKE.closure`` in this process by one returning half the diffusivities."""
    from hpcsuite.les import subgrid
    original = subgrid.SubgridTKE.closure

    def closure(self, ctx, geo):
        ekm, ekh, *rest = original(self, ctx, geo)
        return (0.5 * ekm, 0.5 * ekh, *rest)
    subgrid.SubgridTKE.closure = closure


def _changes(error: str, folder: Path, args) -> dict:
    nx, ny, nz = args.shape
    ch = {"grid.nx": nx, "grid.ny": ny, "grid.nz": nz, "grid.xsize": args.size[0],
          "grid.ysize": args.size[1], "grid.zsize": args.size[2], "time.t_end": 3600.0 * args.hours,
          "case.seed": args.seed, "output.dir": str(folder), "output.sections_every": 0.0,
          "output.fields": False, "output.checkpoint": "", "output.checkpoint_every": 0,
          "output.stats_every": 60.0}
    if error in ("no_subsidence", "no_radiation"):
        from hpcsuite.les.cases import bomex_profiles, write_dales_case
        zf = (np.arange(nz) + 0.5) * args.size[2] / nz
        prof = bomex_profiles(zf)
        prof["wfls" if error == "no_subsidence" else "dthlrad"] = np.zeros(nz)
        write_dales_case(folder / "case", 1, zf, prof, title=f"BOMEX, {error}")
        ch.update({"case.kind": "dales", "case.folder": str(folder / "case")})
    elif error == "flux_half":
        ch.update({"physics.wthl": 4e-3, "physics.wqt": 2.6e-5})
    return ch


def _checks(folder: Path, window) -> dict:
    from test_bomex_physics import check_bomex_physics

    from hpcsuite.les.cases import compare_bomex
    stats = folder / "stats.h5"
    out = {}
    rows = compare_bomex(stats, window)
    import h5py
    with h5py.File(stats, "r") as f:
        tmax = float(f["timeseries/time"][()].max())
    if tmax >= window[1] * 3600 - 1e-6:
        out["compare"] = {r["name"]: {"value": r["value"], "low": r["low"], "high": r["high"], "ok": r["ok"]}
                          for r in rows}
    v, fail = check_bomex_physics(stats)
    out["physics"] = {"values": v, "failures": fail}
    return out


def _summary(name: str, res: dict) -> str:
    lines = [f"== {name}"]
    if "compare" in res:
        bad = [f"{k} {r['value']:.4g} outside [{r['low']:.4g}, {r['high']:.4g}]"
               for k, r in res["compare"].items() if not r["ok"]]
        vals = ", ".join(f"{k} {r['value']:.4g}" for k, r in res["compare"].items())
        lines.append(f"   compare: {vals}")
        lines.append("   compare fails: " + ("; ".join(bad) if bad else "none"))
    ph = res["physics"]
    v = ph["values"]
    lines.append("   physics (hour 2): " + ", ".join(f"{k} {v[k]:.4g}" for k in
                                                     ("cover", "lwp", "cfrac_max", "base", "dthl_ml", "dqt_ml") if k in v))
    lines.append("   physics fails: " + ("; ".join(ph["failures"]) if ph["failures"] else "none"))
    return "\n".join(lines)


def _reap(running):
    """Wait a little; record the wall time of the runs that ended; return those still running."""
    time.sleep(2.0)
    left = []
    for p, folder, t0, log in running:
        if p.poll() is None:
            left.append((p, folder, t0, log))
            continue
        log.close()
        (folder / "wall_s").write_text(f"{time.perf_counter() - t0:.1f}\n")
        if p.returncode != 0:
            print(f"== {folder.name}: the run failed ({p.returncode}); see {folder / 'run.log'}", flush=True)
    return left


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[32, 32, 80], metavar=("NX", "NY", "NZ"))
    ap.add_argument("--size", type=float, nargs=3, default=[3200.0, 3200.0, 3200.0], metavar=("LX", "LY", "LZ"))
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--window", type=float, nargs=2, default=[3.0, 6.0], metavar=("FROM", "TO"),
                    help="hours compared with the same hours of the DALES run")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=1, help="runs at once (ranks x parallel processes)")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank (HPCSUITE_THREADS)")
    ap.add_argument("--errors", nargs="+", default=list(ERRORS), choices=ERRORS)
    ap.add_argument("--out", default="/tmp/les_bomex_errors", help="folder for the runs")
    ap.add_argument("--report", default="", help="only re-read the runs in this folder")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)        # (a rank process: run one deck)
    ap.add_argument("--deck", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:                                   # inside mpiexec: patch, then run the deck
        if args.one == "k_half":
            _halve_diffusivity()
        from hpcsuite.cli import main as cli_main
        return cli_main(["run", args.deck])
    out = Path(args.report or args.out)
    names = [f"{error}_seed{args.seed}" for error in args.errors]
    if not args.report:
        running = []                  # at most --parallel runs at once
        for error, name in zip(args.errors, names):
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            deck = folder / "deck.toml"
            deck.write_text(dk.modified(ROOT / "inputs" / "bomex.toml", _changes(error, folder, args)))
            while len(running) >= args.parallel:
                running = _reap(running)
            log = open(folder / "run.log", "w")
            env = dict(os.environ, HPCSUITE_THREADS=str(args.threads))
            p = subprocess.Popen([str(BIN / "mpiexec"), "-n", str(args.ranks), sys.executable, __file__,
                                  "--one", error, "--deck", str(deck)], stdout=log, stderr=subprocess.STDOUT, env=env)
            running.append((p, folder, time.perf_counter(), log))
        while running:
            running = _reap(running)
    results = {}
    for error, name in zip(args.errors, names):
        folder = out / name
        if not (folder / "stats.h5").is_file():
            print(f"== {name}: no statistics (see {folder / 'run.log'})", flush=True)
            continue
        res = _checks(folder, tuple(args.window))
        results[name] = res
        (folder / "checks.json").write_text(json.dumps(res, indent=1, default=float))
        wall = (folder / "wall_s").read_text().strip() if (folder / "wall_s").is_file() else "?"
        print(_summary(name, res) + f"\n   wall {wall} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``hpcsuite`` command line.

Exit codes: 0 success, 2 bad input (deck or arguments), 1 a failure while running.
Run any sub-command under ``mpiexec``/``srun`` to use several ranks; only rank 0 prints.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__

EPILOG = """\
examples:
  hpcsuite info                                  what this installation can do
  hpcsuite run --list                            the applications and what they do
  hpcsuite run --template heat3d > my.toml       a deck with every key, default and meaning
  hpcsuite inputs --copy decks                   copy the shipped example decks into decks/
  mpiexec -n 4 hpcsuite run inputs/heat3d.toml   run a deck on 4 ranks
  hpcsuite jobscript heat3d --nodes 2 -o j.sbatch a SLURM batch script for an app
  hpcsuite submit j.sbatch inputs/heat3d.toml    check and queue it
  hpcsuite stage up --backend rados --dir D      a Ceph cluster on RAM for this job
  hpcsuite les plot les_bomex_small             PNG plots of an LES run (profiles, clouds)
  hpcsuite les compare les_bomex                a BOMEX run against the intercomparison

exit codes: 0 success, 2 bad input (deck or arguments), 1 a failure while running
"""


def _env_rank() -> int:
    """This process's rank from the launcher's environment (any MPI vendor's), without initialising
    MPI."""
    from .runtime.launcher import env_rank
    return env_rank()


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors once (on rank 0) when started on many ranks."""

    def error(self, message):
        if _env_rank() == 0:
            self.print_usage(sys.stderr)
            sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _add_set_option(parser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE", dest="overrides",
                        help="override a deck key without editing the file (repeatable; the value is "
                        "read as TOML, else as a string: --set grid.nx=64 --set app.device=gpu); "
                        "for sweeps and job arrays")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``hpcsuite`` command and its sub-commands (the docs print its help). Local."""
    p = _Parser(prog="hpcsuite", description="hpcsuite: MPI-parallel scientific computing suite "
                "(PGAS arrays, CPU/GPU solvers, autotuning, job-temporary storage, SLURM job scripts).",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"hpcsuite {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="validate a TOML deck and run its application",
                       description="Validate the whole deck (every rank, before any computation) and "
                       "run the application named by its [app] table. Under mpiexec/srun the "
                       "application runs on all ranks.",
                       epilog="examples:\n  mpiexec -n 4 hpcsuite run inputs/heat3d.toml\n"
                              "  mpiexec -n 4 hpcsuite run inputs/heat3d.toml --set grid.nx=128 --set solver.depth=2\n"
                              "  hpcsuite run --template heat3d",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("deck", nargs="?", help="the TOML input deck")
    r.add_argument("-q", "--quiet", action="store_true",
                   help="no progress or informational lines; only errors and final results")
    r.add_argument("--list", action="store_true", help="list the applications and exit")
    r.add_argument("--template", metavar="APP", help="print a deck for APP with all keys and defaults")
    r.add_argument("--check", action="store_true", help="validate the deck and exit without running")
    _add_set_option(r)

    t = sub.add_parser("tune", help="autotune a distributed factorization from a deck",
                       description="Search the configuration space of a deck's [tune] target, predicting "
                       "each configuration's time from a selective execution (kernels whose time is "
                       "known to the requested confidence are skipped).",
                       epilog="examples:\n  mpiexec -n 4 hpcsuite tune inputs/tune_cholesky.toml --compare-full "
                              "--json out/tune.json\n  hpcsuite run --template tune",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("deck", nargs="?", help="a TOML deck with [app] name = \"tune\"")
    t.add_argument("--shard", metavar="K/N", help="evaluate only configurations K, K+N, K+2N, ... "
                   "(for job arrays: --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)")
    t.add_argument("--collect", nargs="+", metavar="REPORT", help="merge the JSON reports of a sweep "
                   "and print the best configuration (with --json: write the merged report)")
    t.add_argument("--json", metavar="FILE", help="write the JSON report here")
    t.add_argument("--compare-full", action="store_true",
                   help="also run every configuration fully, to check the predictions")
    t.add_argument("-q", "--quiet", action="store_true", help="only errors and the final result")
    _add_set_option(t)

    j = sub.add_parser("jobscript", help="render a SLURM batch script for an app, or check one",
                       description="Render a validated sbatch script from the application's template "
                       "(CPU or GPU variant), or check an existing script without a cluster. A rendered "
                       "script needs no checkout: it activates the Python environment that rendered it, "
                       "launches with the srun --mpi plugin of its MPI, and carries the site file's "
                       "module loads, environment and SLURM defaults (docs/site.md).",
                       epilog="examples:\n  hpcsuite jobscript heat3d --nodes 2 --ntasks-per-node 32 "
                              "--time 01:00:00 -o heat.sbatch\n  hpcsuite jobscript --check my.sbatch\n"
                              "  hpcsuite jobscript --list",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    j.add_argument("app", nargs="?", help="the application (see --list)")
    j.add_argument("--check", metavar="FILE", help="lint FILE: exit 0 when clean, 1 with errors")
    j.add_argument("--list", action="store_true", help="list the templates")
    j.add_argument("--nodes", type=int)
    j.add_argument("--ntasks-per-node", type=int)
    j.add_argument("--cpus-per-task", type=int)
    j.add_argument("--time", help="time limit: M, H:M:S, D-H:M:S ...")
    j.add_argument("--partition", help="default: the site file's [slurm] partition")
    j.add_argument("--account", help="default: the site file's [slurm] account")
    j.add_argument("--qos", help="default: the site file's [slurm] qos")
    j.add_argument("--gpu", type=int, metavar="N", dest="gpus_per_node", help="GPU variant with N GPUs per node")
    j.add_argument("--array", help="job array spec, e.g. 0-15%%4")
    j.add_argument("--job-name")
    j.add_argument("--deck", help="default deck of the script (must exist)")
    j.add_argument("-o", "--output", metavar="FILE", help="write the script here (default: stdout)")
    j.add_argument("--srun-mpi", action="store_true",
                   help="print the srun --mpi plugin for this installation (site file, else its MPI) and exit")

    inp = sub.add_parser("inputs", help="list or copy the example decks shipped with hpcsuite",
                         description="The example decks that ship with hpcsuite (in a checkout: inputs/). "
                         "Without options: list them. --copy DIR copies them (all, or the ones named) "
                         "with the files they read; --path prints the installed file of each.",
                         epilog="examples:\n  hpcsuite inputs\n  hpcsuite inputs --copy decks\n"
                                "  hpcsuite inputs heat3d eigen_mtx --copy .\n"
                                "  mpiexec -n 2 hpcsuite run \"$(hpcsuite inputs --path heat3d)\"",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    inp.add_argument("names", nargs="*", metavar="NAME", help="decks (default: all), e.g. heat3d or eigen_mtx")
    inp.add_argument("--copy", metavar="DIR", help="copy the decks and the files they read into DIR")
    inp.add_argument("--force", action="store_true", help="with --copy: overwrite files that exist")
    inp.add_argument("--path", action="store_true", help="print the installed file of each deck")

    sb = sub.add_parser("submit", help="submit a batch script (sbatch --parsable, dependencies)",
                        description="Check a batch script and queue it; prints the job id.",
                        epilog="examples:\n  hpcsuite submit heat.sbatch inputs/heat3d.toml\n"
                               "  hpcsuite submit heat.sbatch inputs/heat3d.toml --set grid.nx=256\n"
                               "  hpcsuite submit collect.sbatch --after-ok 1234",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sb.add_argument("script")
    sb.add_argument("args", nargs="*", help="arguments for the script (e.g. the deck)")
    sb.add_argument("--after-ok", action="append", default=[], metavar="JOBID",
                    help="start after these jobs succeeded (repeatable)")
    sb.add_argument("--after-any", action="append", default=[], metavar="JOBID",
                    help="start after these jobs ended (repeatable)")
    sb.add_argument("--wait", action="store_true", help="wait for the job and exit with its code")
    sb.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE", dest="overrides",
                    help="deck overrides, passed to the script after its arguments (repeatable; the "
                    "templates hand them to 'hpcsuite run DECK --set ...')")

    from .staging.commands import add_parser as add_stage_parser
    add_stage_parser(sub)

    le = sub.add_parser("les", help="tools for LES runs (plots, BOMEX comparison)",
                        description="Tools for runs of the les application (hpcsuite.apps.les).",
                        epilog="examples:\n  hpcsuite les plot les_bomex_small\n"
                               "  hpcsuite les plot les_cbl -o figures/cbl\n"
                               "  hpcsuite les compare les_bomex              # hours 3-6 vs the intercomparison",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    lsub = le.add_subparsers(dest="les_command", metavar="ACTION", parser_class=_Parser)
    lp = lsub.add_parser("plot", help="profiles, time series and a cloud cross-section as PNG")
    lp.add_argument("run", metavar="RUN", help="the run's output folder ([output] dir) or its stats file")
    lp.add_argument("-o", "--outdir", help="folder for the PNGs (default: RUN/plots)")
    lc = lsub.add_parser("compare", help="a BOMEX run's statistics against the intercomparison's ranges",
                         description="Print a Markdown table of the run's mean cloud base, cloud top, cloud "
                         "cover, liquid water path, inversion height and largest cloud fraction over a "
                         "window of hours, each beside the range of the BOMEX LES intercomparison "
                         "(Siebesma et al. 2003, hours 3-6).")
    lc.add_argument("run", metavar="RUN", help="the run's output folder ([output] dir) or its stats file")
    lc.add_argument("--hours", nargs=2, type=float, default=(3.0, 6.0), metavar=("FROM", "TO"),
                    help="the averaging window in hours (default: 3 6, the intercomparison's)")

    i = sub.add_parser("info", help="versions, MPI, parallel HDF5, GPU and SLURM environment",
                       description="Print what this installation has: Python and library versions, the "
                       "MPI library, whether h5py has parallel HDF5, whether a GPU is usable, and the "
                       "SLURM job environment when inside a job.")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def cmd_run(args) -> int:
    from . import apprunner
    from .runtime import InputError
    if args.list:
        if _env_rank() == 0:
            for name in apprunner.known_apps():
                try:
                    summary = getattr(apprunner.load_app(name), "SUMMARY", "")
                except InputError as exc:        # one broken plug-in must not hide the others
                    summary = f"(cannot be used: {exc})"
                print(f"{name:12s} {summary}")
            for note in apprunner.ignored_entry_points():
                print(f"(ignored: {note})")
        return 0
    if args.template:
        try:
            app = apprunner.load_app(args.template)
        except Exception as exc:  # noqa: BLE001
            if _env_rank() == 0:
                print(f"hpcsuite: error: {exc}", file=sys.stderr)
            return 2
        if _env_rank() == 0:
            print(f"# {app.NAME}: {app.SUMMARY}\n")
            print(app.SCHEMA.describe().replace('name = (required)', f'name = "{app.NAME}"'))
        return 0
    if not args.deck:
        build_parser().parse_args(["run", "--help"])
    if args.check:
        from .runtime import Team, guarded
        team = Team.world()

        def check_only():
            app, deck = apprunner.validate(args.deck, team, args.overrides)
            if team.rank == 0:
                print(f"{args.deck}: OK ({app.NAME})")
        return guarded(check_only, team)
    return apprunner.run_deck(args.deck, quiet=args.quiet, overrides=args.overrides)


def _fail(msg: str, code: int = 2) -> int:
    if _env_rank() == 0:
        print(f"hpcsuite: error: {msg}", file=sys.stderr)
    return code


def cmd_tune(args) -> int:
    if args.collect:
        from .tune.collect import collect_reports
        try:
            merged = collect_reports(args.collect, args.json)
        except (OSError, ValueError) as exc:
            return _fail(str(exc))
        best = merged["best_config"]
        print(f"best of {len(merged['results'])} configurations from {len(args.collect)} report(s): "
              f"{best} predicted {merged['best_predicted_time']:.4g} s")
        return 0
    if not args.deck:
        return _fail("tune: give a deck, or --collect REPORT...")
    shard = None
    if args.shard:
        try:
            k, n = (int(x) for x in args.shard.split("/"))
            if not 0 <= k < n:
                raise ValueError
        except ValueError:
            return _fail(f"tune: --shard must be K/N with 0 <= K < N, got {args.shard!r}")
        shard = (k, n)
    from .apprunner import run_deck
    return run_deck(args.deck, quiet=args.quiet, expect_app="tune", overrides=args.overrides,
                    extra={"json": args.json, "compare_full": args.compare_full, "shard": shard})


def cmd_jobscript(args) -> int:
    from .apprunner import app_jobscripts
    from .jobs import lint_file, render, templates
    from .jobs.render import is_generic, srun_mpi_for
    from .runtime import InputError
    if args.srun_mpi:
        try:
            print(srun_mpi_for()[0])
        except InputError as exc:
            return _fail(str(exc))
        return 0
    apps = app_jobscripts()
    if args.list:
        for app, variants in templates(apps).items():
            generic = " (the generic template)" if any(is_generic(t) for t in variants.values()) else ""
            print(f"{app:12s} {', '.join(sorted(variants))}{generic}")
        return 0
    if args.check:
        try:
            findings = lint_file(args.check)
        except OSError as exc:
            return _fail(f"{args.check}: cannot read: {exc.strerror}")
        for f in findings:
            print(f.format(args.check))
        errors = sum(f.level == "error" for f in findings)
        print(f"{args.check}: {errors} error(s), {len(findings) - errors} warning(s)")
        return 1 if errors else 0
    if not args.app:
        return _fail("jobscript: name an application (hpcsuite jobscript --list) or use --check FILE")
    try:
        text = render(args.app, nodes=args.nodes, ntasks_per_node=args.ntasks_per_node,
                      cpus_per_task=args.cpus_per_task, time=args.time, partition=args.partition,
                      account=args.account, qos=args.qos, gpus_per_node=args.gpus_per_node, deck=args.deck,
                      job_name=args.job_name, array=args.array, apps=apps)
    except InputError as exc:
        return _fail(str(exc))
    if args.output:
        from pathlib import Path
        out = Path(args.output)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(out)
        print(f"wrote {out} (submit with: sbatch {out} or hpcsuite submit {out})")
    else:
        sys.stdout.write(text)
    return 0


def cmd_submit(args) -> int:
    from .jobs import SubmitError, submit
    from .runtime import InputError
    try:
        script_args = list(args.args) + [x for o in args.overrides for x in ("--set", o)]
        job, rc = submit(args.script, script_args, after_ok=args.after_ok, after_any=args.after_any,
                         wait=args.wait)
    except InputError as exc:
        return _fail(str(exc))
    except SubmitError as exc:
        return _fail(str(exc), 1)
    print(job)
    return rc if args.wait else 0


def cmd_inputs(args) -> int:
    """``hpcsuite inputs``: list, locate or copy the shipped example decks. Local (rank 0 acts)."""
    from .runtime import InputError
    from .shipped import copy_decks, deck_info, example_decks, real_path
    decks = example_decks()
    names = [n.removesuffix(".toml") for n in args.names] or list(decks)
    unknown = [n for n in names if n not in decks]
    if unknown:
        return _fail(f"inputs: no shipped deck {unknown[0]!r} (shipped: {', '.join(decks)})")
    if _env_rank() != 0:
        return 0
    if args.copy:
        try:
            written = copy_decks(args.copy, names, overwrite=args.force)
        except (InputError, OSError) as exc:
            return _fail(str(exc))
        print(f"copied {len(written)} file(s) into {args.copy}: "
              + " ".join(p.name for p in written if p.suffix == ".toml"))
        return 0
    if args.path:
        for n in names:
            real = real_path(decks[n])
            if real is None:
                return _fail(f"inputs: {n} is inside a zipped install; use --copy DIR")
            print(real)
        return 0
    for n in names:
        app, what = deck_info(decks[n])
        print(f"{n:20s} {app:8s} {what}")
    print("(hpcsuite inputs --copy DIR [NAME...] copies them; run one: hpcsuite run DIR/NAME.toml)")
    return 0


def cmd_stage(args) -> int:
    from .staging.commands import run
    return run(args, _fail)


def cmd_les(args) -> int:
    """``hpcsuite les plot RUN``: draw the run's plots on this (one) process; ``hpcsuite les compare
    RUN``: the BOMEX comparison table."""
    if args.les_command not in ("plot", "compare"):
        return _fail("les: give an action, e.g. 'hpcsuite les plot RUN' or 'hpcsuite les compare RUN'")
    from pathlib import Path

    from .runtime import InputError
    if args.les_command == "compare":
        return _les_compare(args)
    try:
        from .les.plot import plot_run
        run = Path(args.run)
        out = Path(args.outdir) if args.outdir else (run if run.is_dir() else run.parent) / "plots"
        written = plot_run(run, out) if _env_rank() == 0 else []
    except InputError as exc:
        return _fail(str(exc))
    for w in written:
        print(f"wrote {w}")
    return 0


def _les_compare(args) -> int:
    import numpy as np

    from .les.cases import compare_bomex, format_comparison
    from .les.plot import find_files
    from .runtime import InputError
    h0, h1 = args.hours
    if not 0 <= h0 < h1:
        return _fail(f"les compare: --hours {h0:g} {h1:g}: give FROM < TO, both >= 0")
    try:
        stats, _ = find_files(args.run)
        rows = compare_bomex(stats, (h0, h1))
    except InputError as exc:
        return _fail(str(exc))
    import h5py
    with h5py.File(stats, "r") as f:
        t = f["timeseries/time"][()]
        case = f.attrs.get("case", "")
    print(f"# {stats}: hours {h0:g}-{h1:g}" + (f", case {case}" if case else ""))
    if t.size == 0 or t.max() < h1 * 3600.0 - 1e-6:
        end = "no samples" if t.size == 0 else f"samples end at {t.max() / 3600.0:.3g} h"
        print(f"# note: {end}, before the window's end ({h1:g} h): the means cover less than the window")
    print(format_comparison(rows, (h0, h1)))
    print(f"\n{sum(r['ok'] for r in rows)} of {len(rows)} within the ranges"
          + ("" if all(np.isfinite(r["value"]) for r in rows) else " (n/a: no value in the window)"))
    return 0


def cmd_info(args) -> int:
    from .info import collect, format_info
    info = collect()
    if info["mpi"]["rank"] == 0:
        if args.json:
            import json
            print(json.dumps(info, indent=2))
        else:
            print(format_info(info))
    return 0


def _needs_no_mpi(argv) -> bool:
    """Whether the command line ``argv`` runs without MPI: job scripts, submission, shipped decks,
    help, and the application list and templates (validating or running a deck is collective)."""
    if "mpi4py.MPI" in sys.modules:          # already loaded by the caller: nothing to decide
        return False
    words = [a for a in argv if not a.startswith("-")]
    command = words[0] if words else None
    return (command in (None, "jobscript", "submit", "inputs") or "-h" in argv or "--help" in argv
            or (command == "run" and any(a in ("--list", "--template") or a.startswith("--template=")
                                         for a in argv)))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if _needs_no_mpi(argv):
        # on a login node, rendering a script or listing apps must not start an MPI job (a
        # singleton Open MPI start can fail there, or hang on a site's network); decided before
        # the parser is built, since building it imports modules that import MPI
        import mpi4py
        mpi4py.rc.initialize = False
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if _env_rank() == 0:
            parser.print_help()
        return 2
    return {"run": cmd_run, "info": cmd_info, "jobscript": cmd_jobscript, "submit": cmd_submit,
            "tune": cmd_tune, "stage": cmd_stage, "les": cmd_les, "inputs": cmd_inputs}[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

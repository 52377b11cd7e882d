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
  mpiexec -n 4 hpcsuite run inputs/heat3d.toml   run a deck on 4 ranks

exit codes: 0 success, 2 bad input (deck or arguments), 1 a failure while running
"""


def _env_rank() -> int:
    """This process's rank from the launcher's environment, without initialising MPI."""
    for var in ("PMI_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors once (on rank 0) when started on many ranks."""

    def error(self, message):
        if _env_rank() == 0:
            self.print_usage(sys.stderr)
            sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
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
                              "  hpcsuite run --template heat3d",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("deck", nargs="?", help="the TOML input deck")
    r.add_argument("-q", "--quiet", action="store_true",
                   help="no progress or informational lines; only errors and final results")
    r.add_argument("--list", action="store_true", help="list the applications and exit")
    r.add_argument("--template", metavar="APP", help="print a deck for APP with all keys and defaults")
    r.add_argument("--check", action="store_true", help="validate the deck and exit without running")

    i = sub.add_parser("info", help="versions, MPI, parallel HDF5, GPU and SLURM environment",
                       description="Print what this installation has: Python and library versions, the "
                       "MPI library, whether h5py has parallel HDF5, whether a GPU is usable, and the "
                       "SLURM job environment when inside a job.")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def cmd_run(args) -> int:
    from . import apprunner
    if args.list:
        if _env_rank() == 0:
            for name in apprunner.known_apps():
                print(f"{name:12s} {getattr(apprunner.load_app(name), 'SUMMARY', '')}")
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
            app, deck = apprunner.validate(args.deck, team)
            if team.rank == 0:
                print(f"{args.deck}: OK ({app.NAME})")
        return guarded(check_only, team)
    return apprunner.run_deck(args.deck, quiet=args.quiet)


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


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if _env_rank() == 0:
            parser.print_help()
        return 2
    return {"run": cmd_run, "info": cmd_info}[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

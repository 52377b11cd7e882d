"""Finding, validating and running the applications in ``apps/``.

An application is a module ``apps/<name>.py`` that defines

* ``NAME`` and ``SUMMARY`` (one line),
* ``SCHEMA``: a :class:`hpcsuite.deck.Schema` of the deck tables it accepts,
* ``check(deck, team)`` (optional): cross-key checks that raise ``deck.fail(...)``,
* ``run(deck, ctx) -> int``: the computation; ``ctx`` is an :class:`AppContext`.

:func:`run_deck` reads and validates the whole deck on every rank (collectively agreed) before any
computation, then runs the application under :func:`hpcsuite.runtime.guarded`, so bad input exits 2
with one line and a failure on any rank ends every rank with exit 1.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from . import deck as dk
from .runtime import InputError, Logger, Team, agree, guarded
from .runtime.h5io import require_parallel_h5py
from .runtime.malloc import keep_freed_memory
from .runtime.threads import fit_threads

__all__ = ["apps_dir", "known_apps", "load_app", "AppContext", "validate", "run_deck", "main_for_app"]


def apps_dir() -> Path:
    """The folder holding the applications: ``$HPCSUITE_APPS_DIR`` or ``apps/`` beside the package."""
    return Path(os.environ.get("HPCSUITE_APPS_DIR") or Path(__file__).resolve().parents[1] / "apps")


def known_apps() -> list[str]:
    """Names of the applications in :func:`apps_dir`. Local."""
    d = apps_dir()
    return sorted(p.stem for p in d.glob("*.py") if not p.stem.startswith("_")) if d.is_dir() else []


@functools.lru_cache(maxsize=None)
def load_app(name: str) -> ModuleType:
    """Import ``apps/<name>.py`` (once per process). Local."""
    path = apps_dir() / f"{name}.py"
    if not path.is_file():
        raise InputError(f"unknown application {name!r} (known: {', '.join(known_apps()) or 'none'}; "
                         f"looked in {apps_dir()})")
    spec = importlib.util.spec_from_file_location(f"hpcsuite_app_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for attr in ("SCHEMA", "run"):
        if not hasattr(mod, attr):
            raise InputError(f"{path} is not an hpcsuite application: it defines no {attr}")
    return mod


@dataclass
class AppContext:
    """What an application's ``run`` gets besides its deck."""

    team: Team
    log: Logger
    quiet: bool = False
    extra: dict = field(default_factory=dict)


def _validate_local(path: str, team: Team, overrides: tuple = ()):
    raw = dk.apply_overrides(dk.load(path, team), overrides, path)
    try:
        name = dk.app_name(raw, path, known_apps())
        app = load_app(name)
        deck = dk.parse(raw, app.SCHEMA, path)
        if hasattr(app, "check"):
            app.check(deck, team)
        if getattr(app, "PARALLEL_HDF5", False):   # refused before the run, not at its first output
            require_parallel_h5py(team, f"{path}: the {name} application")
    except dk.DeckError as exc:
        raise dk.DeckError(_blame_override(str(exc), overrides)) from None
    return app, deck


def _blame_override(msg: str, overrides) -> str:
    """``msg`` plus which ``--set`` gave the value it complains about (the file did not)."""
    for item in reversed(overrides):
        table, _, key = item.partition("=")[0].strip().partition(".")
        key = key.strip()
        if any(s in msg for s in (f"[{table}] {key} ", f"[{table}] unknown key {key!r}",
                                  f"unknown table [{table}]")):
            return f"{msg} (from --set {item})"
    return msg


def validate(path: str, team: Team | None = None, overrides=()):
    """Read, parse and check the deck at ``path``, with ``overrides`` (``"TABLE.KEY=VALUE"``
    strings, as from ``--set``) applied first; return ``(app_module, deck)``. Collective.

    Raises the same :class:`InputError` on every rank when anything in the deck is wrong.
    """
    team = team or Team.world()
    return agree(team, _validate_local, str(path), team, tuple(overrides or ()))


def run_deck(path: str, quiet: bool = False, team: Team | None = None, expect_app: str | None = None,
             extra: dict | None = None, overrides=()) -> int:
    """Validate the deck at ``path`` (with ``overrides``, see :func:`validate`) and run its
    application; return the exit code. Collective."""
    team = team or Team.world()

    def main():
        app, deck = validate(path, team, overrides)
        fit_threads(team)          # one BLAS/numba thread per core share, not per core per rank
        keep_freed_memory()        # NumPy temporaries reuse freed memory instead of page-faulting
        if expect_app is not None and app.NAME != expect_app:
            raise InputError(f"{path}: [app] name is {app.NAME!r}, but this is the {expect_app!r} program")
        log = Logger(app.NAME, team, quiet=quiet)
        if overrides:          # batch logs should say what ran, not only which file
            log.info(f"deck {path} with {' '.join('--set ' + o for o in overrides)}")
        ctx = AppContext(team=team, log=log, quiet=quiet, extra=dict(extra or {}))
        return app.run(deck, ctx)

    return guarded(main, team)


def main_for_app(name: str, argv=None) -> int:
    """Command line of a single application (``python apps/NAME.py DECK [--quiet]``)."""
    p = argparse.ArgumentParser(prog=f"apps/{name}.py", description=load_app(name).__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("deck", help="TOML input deck")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the final result")
    p.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE", dest="overrides",
                   help="override a deck key (repeatable)")
    args = p.parse_args(argv)
    return run_deck(args.deck, quiet=args.quiet, expect_app=name, overrides=args.overrides)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_for_app(sys.argv[1], sys.argv[2:]))

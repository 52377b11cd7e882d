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


def _validate_local(path: str, team: Team):
    raw = dk.load(path, team)
    name = dk.app_name(raw, path, known_apps())
    app = load_app(name)
    deck = dk.parse(raw, app.SCHEMA, path)
    if hasattr(app, "check"):
        app.check(deck, team)
    return app, deck


def validate(path: str, team: Team | None = None):
    """Read, parse and check the deck at ``path``; return ``(app_module, deck)``. Collective.

    Raises the same :class:`InputError` on every rank when anything in the deck is wrong.
    """
    team = team or Team.world()
    return agree(team, _validate_local, str(path), team)


def run_deck(path: str, quiet: bool = False, team: Team | None = None, expect_app: str | None = None,
             extra: dict | None = None) -> int:
    """Validate the deck at ``path`` and run its application; return the exit code. Collective."""
    team = team or Team.world()

    def main():
        app, deck = validate(path, team)
        fit_threads(team)          # one BLAS/numba thread per core share, not per core per rank
        if expect_app is not None and app.NAME != expect_app:
            raise InputError(f"{path}: [app] name is {app.NAME!r}, but this is the {expect_app!r} program")
        ctx = AppContext(team=team, log=Logger(app.NAME, team, quiet=quiet), quiet=quiet, extra=dict(extra or {}))
        return app.run(deck, ctx)

    return guarded(main, team)


def main_for_app(name: str, argv=None) -> int:
    """Command line of a single application (``python apps/NAME.py DECK [--quiet]``)."""
    p = argparse.ArgumentParser(prog=f"apps/{name}.py", description=load_app(name).__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("deck", help="TOML input deck")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the final result")
    args = p.parse_args(argv)
    return run_deck(args.deck, quiet=args.quiet, expect_app=name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_for_app(sys.argv[1], sys.argv[2:]))

"""Finding, validating and running the applications.

An application is a module (or any object with these attributes) that defines

* ``NAME`` and ``SUMMARY`` (one line),
* ``SCHEMA``: a :class:`hpcsuite.deck.Schema` of the deck tables it accepts,
* ``check(deck, team)`` (optional): cross-key checks that raise ``deck.fail(...)``,
* ``run(deck, ctx) -> int``: the computation; ``ctx`` is an :class:`AppContext`,
* ``PARALLEL_HDF5`` (optional): ``True`` if its output needs h5py with MPI,
* ``JOBSCRIPT`` / ``JOBSCRIPT_GPU`` (optional): resources of its package holding its batch-script
  templates (see :mod:`hpcsuite.jobs.render`).

The suite's own applications are the modules of :mod:`hpcsuite.apps`. Other packages add theirs
through the entry-point group ``hpcsuite.apps`` (in their ``pyproject.toml``)::

    [project.entry-points."hpcsuite.apps"]
    myapp = "mypackage.myapp"

and then get everything the built-in ones get: ``hpcsuite run --list/--template/--check/--set``,
the one-line deck errors, checkpointing on ``SIGUSR1`` (:class:`hpcsuite.runtime.CheckpointRequest`)
and a job script (``hpcsuite jobscript myapp``).

:func:`run_deck` reads and validates the whole deck on every rank (collectively agreed) before any
computation, then runs the application under :func:`hpcsuite.runtime.guarded`, so bad input exits 2
with one line and a failure on any rank ends every rank with exit 1.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import importlib.resources
import pkgutil
import sys
from dataclasses import dataclass, field
from types import ModuleType

from . import deck as dk
from .runtime import InputError, Logger, Team, agree, guarded
from .runtime.h5io import require_parallel_h5py
from .runtime.malloc import keep_freed_memory
from .runtime.threads import fit_threads

__all__ = ["ENTRY_POINT_GROUP", "registry", "ignored_entry_points", "known_apps", "load_app", "app_jobscripts",
           "AppContext", "validate", "run_deck", "main_for_app"]

ENTRY_POINT_GROUP = "hpcsuite.apps"
BUILTIN_PACKAGE = "hpcsuite.apps"


@functools.lru_cache(maxsize=None)
def _scan() -> tuple[dict[str, str], tuple[str, ...]]:
    reg: dict[str, str] = {}
    builtin = importlib.import_module(BUILTIN_PACKAGE)
    for m in pkgutil.iter_modules(builtin.__path__):
        if not m.name.startswith("_"):
            reg[m.name] = f"{BUILTIN_PACKAGE}.{m.name}"
    ignored = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in reg and reg[ep.name] != ep.value:
            dist = getattr(ep.dist, "name", "?")
            ignored.append(f"entry point {ep.name} = {ep.value!r} of {dist}: the name is taken by {reg[ep.name]}")
            continue
        reg[ep.name] = ep.value
    return reg, tuple(ignored)


def registry() -> dict[str, str]:
    """``{name: "module[:attribute]"}`` of every application: the modules of :mod:`hpcsuite.apps`
    and the entry points of the group ``hpcsuite.apps`` (read once per process). Local."""
    return dict(_scan()[0])


def ignored_entry_points() -> list[str]:
    """Entry points left out because their name was taken by another application. Local."""
    return list(_scan()[1])


def known_apps() -> list[str]:
    """Names of the applications (see :func:`registry`), sorted. Local."""
    return sorted(_scan()[0])


@functools.lru_cache(maxsize=None)
def load_app(name: str) -> ModuleType:
    """Import the application ``name`` (once per process). Local.

    Raises
    ------
    InputError
        ``name`` is not a known application, it cannot be imported (a missing dependency is named),
        or it lacks ``SCHEMA`` or ``run``.
    """
    reg = registry()
    if name not in reg:
        raise InputError(f"unknown application {name!r} (known: {', '.join(sorted(reg)) or 'none'})")
    target = reg[name]
    mod_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(mod_name.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
    except InputError:
        raise
    except (ImportError, AttributeError) as exc:
        raise InputError(f"application {name!r} ({target}) cannot be loaded: {type(exc).__name__}: {exc}") from None
    for needed in ("SCHEMA", "run"):
        if not hasattr(obj, needed):
            raise InputError(f"application {name!r} ({target}) is not an hpcsuite application: it defines no {needed}")
    return obj


def app_jobscripts() -> dict[str, dict]:
    """``{app: {"cpu": template, "gpu": template}}`` for the applications of other packages: the
    batch templates each ships (empty when none; then the generic template serves it). Local
    (imports those applications; one that cannot be imported gets ``{}``).

    An application names its templates by the attributes ``JOBSCRIPT`` / ``JOBSCRIPT_GPU``, paths
    of resources inside its package (``"jobscripts/myapp.sbatch"``), or ships them as
    ``jobscripts/NAME.sbatch`` / ``jobscripts/NAME-gpu.sbatch`` in its package. hpcsuite's own
    applications have theirs in ``hpcsuite.jobscripts`` and are left out.
    """
    out = {}
    for name, target in registry().items():
        if target.startswith(BUILTIN_PACKAGE + "."):
            continue
        try:
            mod = load_app(name)
        except InputError:
            out[name] = {}
            continue
        out[name] = _own_jobscripts(name, mod)
    return out


def _own_jobscripts(name: str, mod) -> dict:
    pkg = mod.__name__ if hasattr(mod, "__path__") else (getattr(mod, "__package__", "") or "")
    if not pkg:
        return {}
    try:
        root = importlib.resources.files(pkg)
    except (ImportError, TypeError, ValueError):
        return {}
    found = {}
    for variant, attr, default in (("cpu", "JOBSCRIPT", f"jobscripts/{name}.sbatch"),
                                   ("gpu", "JOBSCRIPT_GPU", f"jobscripts/{name}-gpu.sbatch")):
        res = root.joinpath(*str(getattr(mod, attr, None) or default).split("/"))
        if res.is_file():
            found[variant] = res
    return found


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
    """Command line of a single application (``python apps/NAME.py DECK [--quiet] [--set ...]``,
    the launchers in the repository's ``apps/``). Collective (under mpiexec/srun)."""
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

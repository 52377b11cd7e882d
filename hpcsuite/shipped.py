"""The files that ship with hpcsuite: the example decks and the batch-script templates.

In the repository they are the top-level folders ``inputs/`` and ``jobscripts/``; an installed
hpcsuite (wheel or editable) has them as the packages ``hpcsuite.inputs`` and
``hpcsuite.jobscripts`` (setup.py maps the folders), and this module reads them through
:mod:`importlib.resources`, never by a path relative to the source tree. ``hpcsuite inputs``
lists and copies the decks.

Examples
--------
>>> sorted(example_decks())[:2]
['advect_sine', 'bomex']
>>> deck_info(example_decks()["heat3d"])[0]
'heat3d'
"""
from __future__ import annotations

import importlib.resources
import shutil
import tomllib
from importlib.resources.abc import Traversable
from pathlib import Path

from .runtime.errors import InputError

__all__ = ["inputs_folder", "jobscripts_folder", "example_decks", "deck_info", "real_path", "copy_decks"]

_SKIP = ("__init__.py", "__pycache__")


def inputs_folder() -> Traversable:
    """The example decks' folder (``hpcsuite.inputs``). Local."""
    return importlib.resources.files("hpcsuite.inputs")


def jobscripts_folder() -> Traversable:
    """The batch-script templates' folder (``hpcsuite.jobscripts``). Local."""
    return importlib.resources.files("hpcsuite.jobscripts")


def example_decks() -> dict[str, Traversable]:
    """``{name: deck}`` of the shipped decks (``heat3d`` for ``heat3d.toml``), sorted. Local."""
    return {p.name.removesuffix(".toml"): p for p in sorted(inputs_folder().iterdir(), key=lambda p: p.name)
            if p.is_file() and p.name.endswith(".toml")}


def deck_info(deck: Traversable) -> tuple[str, str]:
    """``(application, what it is)`` of a shipped deck: its ``[app] name`` and its first comment
    line. Local."""
    text = deck.read_text(encoding="utf-8")
    try:
        app = str(tomllib.loads(text).get("app", {}).get("name", "?"))
    except tomllib.TOMLDecodeError:
        app = "?"
    first = next((l.lstrip("# ").strip() for l in text.splitlines() if l.startswith("#") and l.strip("# ")), "")
    return app, first


def real_path(item: Traversable) -> Path | None:
    """``item`` as a file-system path when it is one (always, except for a zipped install). Local."""
    return item if isinstance(item, Path) else None


def _referenced(deck: Traversable, folder: Traversable) -> list[Traversable]:
    """Files and folders of ``folder`` that ``deck`` names in a string value (a matrix file, a DALES
    case folder), so that a copied deck finds them beside it."""
    try:
        raw = tomllib.loads(deck.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError:
        return []
    names = {p.name: p for p in folder.iterdir() if p.name not in _SKIP and not p.name.endswith(".toml")}
    found = []
    for table in raw.values():
        for value in (table.values() if isinstance(table, dict) else ()):
            if isinstance(value, str) and Path(value).name in names and names[Path(value).name] not in found:
                found.append(names[Path(value).name])
    return found


def _copy(item: Traversable, dest: Path, written: list[Path]) -> None:
    if item.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        for sub in item.iterdir():
            if sub.name not in _SKIP:
                _copy(sub, dest / sub.name, written)
    else:
        dest.write_bytes(item.read_bytes())
        written.append(dest)


def copy_decks(dest: str | Path, names=None, overwrite: bool = False) -> list[Path]:
    """Copy the shipped decks ``names`` (default: all of them) into the folder ``dest`` (made if
    needed), with the files they read (matrix files, DALES case folders); return the files
    written. Local.

    Raises
    ------
    InputError
        An unknown deck name (naming the shipped ones), or a file in ``dest`` that would be
        overwritten without ``overwrite``.
    """
    decks = example_decks()
    names = list(decks) if not names else [n.removesuffix(".toml") for n in names]
    unknown = [n for n in names if n not in decks]
    if unknown:
        raise InputError(f"inputs: no shipped deck {unknown[0]!r} (shipped: {', '.join(decks)})")
    folder = inputs_folder()
    items: list[Traversable] = []
    for n in names:
        for item in [decks[n], *_referenced(decks[n], folder)]:
            if item not in items:
                items.append(item)
    dest = Path(dest)
    if not overwrite:
        for item in items:
            if (dest / item.name).exists():
                raise InputError(f"inputs: {dest / item.name} exists (give --force to overwrite it)")
    if dest.exists() and not dest.is_dir():
        raise InputError(f"inputs: {dest} is not a folder")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for item in items:
        if item.is_dir() and (dest / item.name).exists():
            shutil.rmtree(dest / item.name)
        _copy(item, dest / item.name, written)
    return written

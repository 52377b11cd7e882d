"""TOML input decks: reading them once, validating all of them before any computation.

A deck is a TOML file whose ``[app]`` table names the application; the other tables are the
application's. Each application declares a :class:`Schema` of typed fields. :func:`load` reads the
file on rank 0 and broadcasts its bytes, so every rank parses the same text and reaches the same
verdict; every error is one line that names the file, the table and the key::

    inputs/x.toml: [grid] nx must be a positive integer, got -4

Keys can be overridden without editing the file (``hpcsuite run DECK --set grid.nx=64``, for
sweeps and job arrays): :func:`apply_overrides` sets them on the parsed TOML before the schema
check, so an override is validated exactly like the file.

Why not a validation library: the errors must be exactly one line in the deck's own vocabulary
(file, ``[table]``, key) and identical on every rank; a small typed field list does that in fewer
lines than adapting pydantic's or jsonschema's messages, and adds no dependency.
"""
from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .runtime.errors import InputError

__all__ = ["modified", "apply_overrides", "DeckError", "Deck", "Schema", "Int", "Float", "Str", "Bool", "Choice", "IntList",
           "FloatList", "AnyList", "Modes", "load", "parse", "read_text"]

_REQUIRED = object()


class DeckError(InputError):
    """A deck that cannot be run. The message is one line naming file, table and key."""


def _got(value) -> str:
    kind = {str: "a string", bool: "a boolean", list: "a list", dict: "a table"}.get(type(value))
    return f"got {value!r}" + (f" ({kind})" if kind and not isinstance(value, (list, dict)) else "")


@dataclass
class Field:
    """A typed deck key. Subclasses implement :meth:`convert` returning the value or raising
    ``ValueError(problem)`` where problem reads after the key name ("must be ...")."""

    default: Any = _REQUIRED
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def convert(self, value):  # pragma: no cover - abstract
        """The checked (and converted) value, or ``ValueError(problem)``. Local."""
        raise NotImplementedError


def _range_words(kind: str, lo, hi, lo_open: bool, hi_open: bool) -> str:
    if lo == 0 and hi is None:
        return f"a positive {kind}" if lo_open else f"a non-negative {kind}"
    if lo is not None and hi is not None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} {'<' if hi_open else '<='} {hi}"
    return f"{'an' if kind == 'integer' else 'a'} {kind}"


def _plural(words: str, noun: str) -> str:
    """``"an integer in [0, 9]"`` -> ``"integers in [0, 9]"``: the words of one item, for a list."""
    return words.removeprefix("a ").removeprefix("an ").replace(noun, noun + "s", 1)


@dataclass
class Int(Field):
    """An integer with optional inclusive bounds (``min=1`` reads "a positive integer")."""

    min: int | None = None
    max: int | None = None

    def words(self) -> str:
        if self.min == 1 and self.max is None:
            return "a positive integer"
        return _range_words("integer", self.min, self.max, False, False)

    def convert(self, v):
        if isinstance(v, bool) or not isinstance(v, int) or \
           (self.min is not None and v < self.min) or (self.max is not None and v > self.max):
            raise ValueError(f"must be {self.words()}, {_got(v)}")
        return v


@dataclass
class Float(Field):
    """A finite real number (integers accepted) with optional bounds; ``gt``/``lt`` are strict."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def words(self) -> str:
        lo = self.gt if self.gt is not None else self.ge
        hi = self.lt if self.lt is not None else self.le
        return _range_words("number", lo, hi, self.gt is not None, self.lt is not None)

    def convert(self, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
           (self.ge is not None and v < self.ge) or (self.gt is not None and v <= self.gt) or \
           (self.le is not None and v > self.le) or (self.lt is not None and v >= self.lt):
            raise ValueError(f"must be {self.words()}, {_got(v)}")
        return float(v)


@dataclass
class Str(Field):
    """A string (``nonempty=True`` rejects ``""``)."""

    nonempty: bool = False

    def convert(self, v):
        if not isinstance(v, str) or (self.nonempty and not v):
            raise ValueError(f"must be a {'non-empty ' if self.nonempty else ''}string, {_got(v)}")
        return v


@dataclass
class Bool(Field):
    """``true`` or ``false``."""

    def convert(self, v):
        if not isinstance(v, bool):
            raise ValueError(f"must be true or false, {_got(v)}")
        return v


@dataclass
class Choice(Field):
    """One of a fixed set of strings."""

    choices: Sequence[str] = ()

    def convert(self, v):
        if v not in self.choices:
            raise ValueError(f"must be one of {', '.join(map(repr, self.choices))}, {_got(v)}")
        return v


@dataclass
class IntList(Field):
    """A list of integers (each within ``min``/``max``), of length ``length`` if given."""

    length: int | None = None
    min: int | None = None
    max: int | None = None

    def convert(self, v):
        item = Int(min=self.min, max=self.max)
        n = f"{self.length} " if self.length else ""
        if not isinstance(v, list) or (self.length and len(v) != self.length):
            raise ValueError(f"must be a list of {n}integers, {_got(v)}")
        for x in v:
            try:
                item.convert(x)
            except ValueError:
                raise ValueError(f"must be a list of {n}{_plural(item.words(), 'integer')}, {_got(v)}") from None
        return list(v)


@dataclass
class FloatList(Field):
    """A list of numbers of length ``length`` if given, each satisfying ``item``."""

    length: int | None = None
    item: Float = field(default_factory=Float)

    def convert(self, v):
        n = f"{self.length} " if self.length else ""
        if not isinstance(v, list) or (self.length and len(v) != self.length):
            raise ValueError(f"must be a list of {n}numbers, {_got(v)}")
        try:
            return [self.item.convert(x) for x in v]
        except ValueError:
            raise ValueError(f"must be a list of {n}{_plural(self.item.words(), 'number')}, {_got(v)}") from None


@dataclass
class AnyList(Field):
    """A non-empty list of items checked by the application (``what`` says what they must be)."""

    what: str = "values"

    def convert(self, v):
        if not isinstance(v, list) or not v:
            raise ValueError(f"must be a non-empty list of {self.what}, {_got(v)}")
        return list(v)


@dataclass
class Modes(Field):
    """A non-empty list of ``[kx, ky, kz, amplitude]`` (integer wavenumbers, real amplitude)."""

    def convert(self, v):
        msg = "must be a non-empty list of [kx, ky, kz, amplitude] with integer k"
        if not isinstance(v, list) or not v:
            raise ValueError(f"{msg}, {_got(v)}")
        out = []
        for m in v:
            if not (isinstance(m, list) and len(m) == 4 and
                    all(isinstance(k, int) and not isinstance(k, bool) for k in m[:3]) and
                    isinstance(m[3], (int, float)) and not isinstance(m[3], bool) and math.isfinite(m[3])):
                raise ValueError(f"{msg}, got {m!r}")
            out.append((m[0], m[1], m[2], float(m[3])))
        return out


class Table(dict):
    """A validated deck table: a dict whose keys also read as attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _toml_value(v) -> str:
    """``v`` written as a TOML value on one line (a string through tomli-w, so quotes and
    backslashes in it are escaped); ``None`` (no default) stays ``None``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        import tomli_w                    # a well-kept TOML writer (tomllib only reads)
        return tomli_w.dumps({"v": v}).removeprefix("v = ").rstrip("\n")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


class Schema:
    """The tables and typed keys an application accepts.

    Parameters
    ----------
    tables : dict
        ``{table_name: {key: Field}}``. A table whose keys all have defaults may be left out of a deck.
    doc : dict, optional
        One-line descriptions of the tables (for ``hpcsuite run --describe``).
    """

    def __init__(self, tables: dict[str, dict[str, Field]], doc: dict[str, str] | None = None):
        self.tables, self.doc = tables, doc or {}

    def describe(self) -> str:
        """A template deck listing every table and key with its default and help."""
        lines = []
        for t, keys in self.tables.items():
            lines.append(f"[{t}]" + (f"    # {self.doc[t]}" if t in self.doc else ""))
            for k, f in keys.items():
                val = "(required)" if f.required else _toml_value(f.default)
                lines.append(f"{k} = {val}" + (f"    # {f.help}" if f.help else ""))
            lines.append("")
        return "\n".join(lines)


class Deck(dict):
    """A validated deck: ``deck["grid"]["nx"]`` or ``deck.grid.nx``; ``deck.path`` is the file."""

    path: str = "<deck>"

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def fail(self, table: str, key: str | None, problem: str) -> DeckError:
        """A :class:`DeckError` in the standard format, for checks that involve several keys."""
        return DeckError(f"{self.path}: [{table}]{' ' + key if key else ''} {problem}")


def _suggest(word: str, known) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"


def parse(raw: dict, schema: Schema, path: str = "<deck>") -> Deck:
    """Check ``raw`` (parsed TOML) against ``schema``: unknown tables and keys, missing required
    keys, types and ranges. Returns a :class:`Deck` with defaults filled in. Local."""
    deck = Deck()
    deck.path = path
    for t in raw:
        if t not in schema.tables:
            raise DeckError(f"{path}: unknown table [{t}]{_suggest(t, schema.tables)}")
        if not isinstance(raw[t], dict):
            raise DeckError(f"{path}: {t} must be a table [{t}], {_got(raw[t])}")
    for t, keys in schema.tables.items():
        given = raw.get(t, {})
        for k in given:
            if k not in keys:
                raise DeckError(f"{path}: [{t}] unknown key {k!r}{_suggest(k, keys)}")
        table = Table()
        for k, f in keys.items():
            if k not in given:
                if f.required:
                    raise DeckError(f"{path}: [{t}] {k} is required" + (f" ({f.help})" if f.help else ""))
                table[k] = f.default
                continue
            try:
                table[k] = f.convert(given[k])
            except ValueError as exc:
                raise DeckError(f"{path}: [{t}] {k} {exc}") from None
        deck[t] = table
    return deck


def read_text(path: str | Path, team=None) -> str:
    """The text of ``path``, read on rank 0 and broadcast. Collective over ``team``.

    Raises :class:`DeckError` on every rank if the file is missing, unreadable or not UTF-8.
    """
    err = text = None
    if team is None or team.rank == 0:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            err = f"{path}: no such file"
        except IsADirectoryError:
            err = f"{path}: is a directory, not a deck file"
        except (OSError, UnicodeDecodeError) as exc:
            err = f"{path}: cannot read: {exc}"
    if team is not None and team.size > 1:
        err, text = team.bcast((err, text))
    if err:
        raise DeckError(err)
    return text


def load(path: str | Path, team=None) -> dict:
    """Read and parse the TOML at ``path`` (no schema check yet). Collective over ``team``."""
    text = read_text(path, team)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeckError(f"{path}: not valid TOML: {exc}") from None


def _override_value(text: str):
    """A ``--set`` value: a TOML value when it reads as one (``64``, ``1e-3``, ``true``,
    ``[2, 1]``, ``"x"``), else the text itself as a string (``gpu``, ``runs/a``)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(raw: dict, overrides: Sequence[str], path: str = "<deck>") -> dict:
    """``raw`` (parsed TOML) with each ``"TABLE.KEY=VALUE"`` of ``overrides`` set, in order (later
    ones win; tables made as needed). Local; the schema check comes after, as for the file.

    Raises
    ------
    DeckError
        For an override that is not of the form ``TABLE.KEY=VALUE``.

    Examples
    --------
    >>> apply_overrides({"grid": {"nx": 8}}, ["grid.nx=64", "app.device=gpu"])
    {'grid': {'nx': 64}, 'app': {'device': 'gpu'}}
    """
    for item in overrides:
        name, eq, value = item.partition("=")
        table, dot, key = name.strip().partition(".")
        if not (eq and dot and table and key and value.strip()):
            raise DeckError(f"{path}: --set {item!r}: expected TABLE.KEY=VALUE, e.g. --set grid.nx=64")
        slot = raw.setdefault(table, {})
        if not isinstance(slot, dict):
            raise DeckError(f"{path}: --set {item!r}: {table} is not a table in this deck")
        slot[key.strip()] = _override_value(value.strip())
    return raw


def app_name(raw: dict, path: str, known: Sequence[str]) -> str:
    """The application named by ``[app] name``; a :class:`DeckError` listing ``known`` if absent."""
    app = raw.get("app")
    if not isinstance(app, dict) or "name" not in app:
        raise DeckError(f"{path}: [app] name is required: the application to run "
                        f"(known: {', '.join(known)})")
    name = app["name"]
    if name not in known:
        raise DeckError(f"{path}: [app] name {name!r} is not a known application (known: {', '.join(known)})")
    return name


def modified(path, changes: dict | None = None, drop: Sequence[str] = ()) -> str:
    """The TOML text of the deck at ``path`` with ``{"table.key": value}`` changed (tables made
    as needed) and the ``"table.key"`` entries in ``drop`` removed. Local.

    For parameter sweeps, tests and benchmarks that vary a shipped deck::

        Path("run.toml").write_text(modified("inputs/cbl.toml", {"grid.nx": 16}))
    """
    import tomli_w                        # a well-kept TOML writer (tomllib only reads)
    raw = tomllib.loads(Path(path).read_text())
    for k, v in (changes or {}).items():
        table, key = k.split(".", 1)
        raw.setdefault(table, {})[key] = v
    for k in drop:
        table, key = k.split(".", 1)
        raw.get(table, {}).pop(key, None)
    return tomli_w.dumps(raw)

"""Sphinx extension: the command-line and deck references, generated at build time.

Two directives, so the reference pages cannot drift from the code:

``.. hpcsuite-cli::``
    ``hpcsuite --help`` and every sub-command's ``--help``, from :func:`hpcsuite.cli.build_parser`
    (the parser the command itself uses), at a fixed width of 100 columns.

``.. hpcsuite-decks::``
    For every application shipped in :mod:`hpcsuite.apps` (not third-party entry points: what a
    machine happens to have installed must not change the documentation): its summary, then each
    ``[table]`` of its :class:`hpcsuite.deck.Schema` with every key's type, default and help, and the
    template deck that ``hpcsuite run --template APP`` prints.

Both produce reStructuredText and parse it in place.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import re

from docutils.parsers.rst import Directive
from docutils.statemachine import StringList


def _kind(field) -> str:
    """The type of a deck field in the words of its error messages."""
    from hpcsuite import deck as dk
    if isinstance(field, dk.Bool):
        return "true or false"
    if isinstance(field, dk.Choice):
        return "one of " + ", ".join(f'``"{c}"``' for c in field.choices)
    if isinstance(field, dk.IntList):
        n = f"{field.length} " if field.length else ""
        return f"list of {n}integers"
    if isinstance(field, dk.FloatList):
        n = f"{field.length} " if field.length else ""
        return f"list of {n}numbers"
    if isinstance(field, dk.AnyList):
        return f"non-empty list of {field.what}"
    if isinstance(field, dk.Modes):
        return "list of ``[kx, ky, kz, amplitude]``"
    if isinstance(field, dk.Str):
        return "non-empty string" if field.nonempty else "string"
    words = getattr(field, "words", None)
    return words() if callable(words) else type(field).__name__


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value).replace("'", '"')


def _cell(text: str) -> str:
    return " ".join(str(text).split()) or " "


def _text(text: str) -> str:
    """Plain text (a deck key's help) as reST that shows it verbatim: markup characters escaped."""
    out = _cell(text)
    for ch in "\\*`|_[]":
        out = out.replace(ch, "\\" + ch)
    return out


def builtin_apps() -> list:
    """The application modules of :mod:`hpcsuite.apps`, by name."""
    pkg = importlib.import_module("hpcsuite.apps")
    return [importlib.import_module(f"hpcsuite.apps.{m.name}")
            for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
            if not m.name.startswith("_")]


def deck_rst() -> list[str]:
    """reStructuredText of the deck reference."""
    out: list[str] = []
    for app in builtin_apps():
        name = app.NAME
        out += [f".. _deck-{name}:", "", f"``{name}``", "-" * (len(name) + 4), "",
                _cell(app.SUMMARY) + ".", "",
                f"Module :mod:`{app.__name__}`; template: ``hpcsuite run --template {name}``.", ""]
        schema = app.SCHEMA
        for table, keys in schema.tables.items():
            title = f"[{table}]"
            out += [f"``{title}``", "~" * (len(title) + 4), ""]
            if table in schema.doc:
                out += [_cell(schema.doc[table]), ""]
            out += [".. list-table::", "   :header-rows: 1", "   :widths: 18 27 15 40", "",
                    "   * - key", "     - type", "     - default", "     - meaning"]
            for key, f in keys.items():
                if table == "app" and key == "name":
                    default = f'``"{name}"``'
                else:
                    default = "required" if f.required else f"``{_toml(f.default)}``"
                out += [f"   * - ``{key}``", f"     - {_cell(_kind(f))}", f"     - {default}",
                        f"     - {_text(f.help)}"]
            out.append("")
    return out


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:              # argparse has no public accessor for sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def cli_rst() -> list[str]:
    """reStructuredText of the command-line reference."""
    from hpcsuite.cli import build_parser
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"               # argparse wraps to $COLUMNS: make the text fixed
    try:
        parser = build_parser()
        out = ["``hpcsuite``", "-" * 12, "", ".. code-block:: text", ""]
        out += ["   " + line for line in parser.format_help().splitlines()] + [""]

        def walk(prefix: str, p: argparse.ArgumentParser):
            for name, sub in _subparsers(p):
                title = f"``{prefix} {name}``"
                out.extend([title, "-" * len(title), "", ".. code-block:: text", ""])
                out.extend("   " + line for line in sub.format_help().splitlines())
                out.append("")
                walk(f"{prefix} {name}", sub)
        walk("hpcsuite", parser)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return out


class _Generated(Directive):
    has_content = False

    def make(self) -> list[str]:
        return []

    def run(self):
        from docutils import nodes
        from sphinx.util.nodes import nested_parse_with_titles
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(self.make(), source=f"<{self.name}>"), node)
        return node.children


def _kind_of_call(doc: str) -> str:
    """What the docstring says about the call: collective, one-sided or local ("" if it says none).
    Read from the words the package's docstrings use ("Collective.", "Creating one is collective",
    "One-sided", "Local", "Non-collective")."""
    if re.search(r"(?<![Nn]on-)\bCollective\b|\b(is|are|all)\s+collective\b", doc):
        return "collective"
    if re.search(r"\b[Oo]ne-sided\b", doc):
        return "one-sided"
    if re.search(r"\bLocal\b|\bNon-collective\b|\bis\s+local\b", doc):
        return "local"
    return ""


class ExportsDirective(_Generated):
    """``.. hpcsuite-exports:: PACKAGE``: a table of the names in PACKAGE's ``__all__`` (its public
    API), each linked to its documentation, with the first line of its docstring and whether its
    docstring calls it collective, local or one-sided."""

    required_arguments = 1

    def make(self):
        pkg = importlib.import_module(self.arguments[0])
        if not hasattr(pkg, "__all__"):
            return [f"``{pkg.__name__}`` has no ``__all__``: import its modules, below.", ""]
        out = [".. list-table::", "   :header-rows: 1", "   :widths: 25 12 63", "",
               "   * - name", "     - call", "     - summary"]
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            doc = inspect.getdoc(obj) if (inspect.isclass(obj) or callable(obj) or inspect.ismodule(obj)) else None
            if doc and not (inspect.isclass(obj) or inspect.isroutine(obj)) and type(obj).__doc__ == doc:
                doc = None                        # an instance: its type's docstring says nothing of it
            first = " ".join((doc or "").split("\n\n")[0].split())
            first = first.split(". ")[0].rstrip(".") + "." if first else ""
            # roles in a summary would resolve in the package's context, not the module's: text
            first = re.sub(r":[a-z:]+:`~?([^`<]*?)(?: <[^>]*>)?`", r"``\1``", first)
            kind = ("exception" if inspect.isclass(obj) and issubclass(obj, BaseException)
                    else _kind_of_call(doc or ""))
            out += [f"   * - :py:obj:`~{pkg.__name__}.{name}`", f"     - {kind}",
                    f"     - {first or ' '}"]
        out.append("")
        # constants (no docstring of their own, no identity to find them by): documented here
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            if not (inspect.isclass(obj) or callable(obj) or inspect.ismodule(obj)):
                out += [f".. py:data:: {pkg.__name__}.{name}", f"   :value: {_cell(repr(obj))}", ""]
        return out


class ModulesDirective(_Generated):
    """``.. hpcsuite-modules:: PACKAGE``: a section per submodule of PACKAGE with its docstring
    (the module's own guide), so a new module appears without editing the page."""

    required_arguments = 1
    option_spec = {"no-members": lambda arg: True}

    def make(self):
        return self._package(importlib.import_module(self.arguments[0]))

    def _package(self, pkg) -> list[str]:
        out = []
        for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if m.name.startswith("_"):
                continue
            name = f"{pkg.__name__}.{m.name}"
            mod = importlib.import_module(name)
            out += [f"``{name}``", "-" * (len(name) + 4), "", f".. automodule:: {name}"]
            if "no-members" in self.options:
                out.append("   :no-members:")
            elif hasattr(mod, "__all__"):
                # the module's own public names, and what the package exports from it
                members = list(mod.__all__) + [
                    n for n in getattr(pkg, "__all__", ()) if n not in mod.__all__
                    and getattr(getattr(pkg, n), "__module__", None) == name and hasattr(mod, n)]
                out.append("   :members: " + ", ".join(members) if members else "   :no-members:")
                out.append("   :ignore-module-all:")
            out.append("")
            if m.ispkg:                               # a subpackage: its modules too
                out += self._package(mod)
        return out


class CliDirective(_Generated):
    def make(self):
        return cli_rst()


class DecksDirective(_Generated):
    def make(self):
        return deck_rst()


# -- references to an object by the module that defines it -----------------------------------------
# The reference documents each public object once, under the name users import it by
# (``hpcsuite.pgas.Halo``); docstrings inside the package often name it by the module that defines
# it (``hpcsuite.pgas.halo.Halo.update``) or relative to their own module (``DEPTH_CANDIDATES``).
# Such a reference is resolved when the name imports to the very object that is documented under
# its public name. A name that imports nothing, or an object that is not documented, stays a broken
# reference (and fails the build).

def _import_path(path: str, module: bool = False):
    """The object named by the dotted ``path``, or None if nothing has that name.

    Python's attribute access decides first (``hpcsuite.jobs.render`` is the function that package
    exports); where that fails, the longest importable module prefix (``hpcsuite.jobs.render.render``
    is the function in the module ``hpcsuite.jobs.render``). ``module=True``: the module itself.
    """
    path = path.lstrip(".")
    parts = path.split(".")
    if module:
        try:
            return importlib.import_module(path)
        except Exception:                         # noqa: BLE001 - not importable: not this name
            return None
    try:
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], start=1):
            if hasattr(obj, part):
                obj = getattr(obj, part)
            elif inspect.ismodule(obj):
                obj = importlib.import_module(".".join(parts[:i + 1]))
            else:
                raise AttributeError(part)
        return obj
    except Exception:                             # noqa: BLE001
        pass
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:                         # noqa: BLE001
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            return None
    return None


def _trackable(obj) -> bool:
    """Objects whose identity names them (not small ints, strings, None that many names share)."""
    return not isinstance(obj, (int, float, str, bytes, bool, type(None)))


_DOCUMENTED: dict = {}


def _reset(app) -> None:
    _DOCUMENTED.clear()


def _documented(env) -> dict:
    cache = _DOCUMENTED
    if not cache:
        for fullname, entry in env.get_domain("py").objects.items():
            if not fullname.startswith("hpcsuite") or getattr(entry, "aliased", False):
                continue
            obj = _import_path(fullname, module=entry.objtype == "module")
            if obj is not None and _trackable(obj):
                cache.setdefault(id(obj), (fullname, entry))
    return cache


def _resolve_alias(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    modname, clsname = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if modname and clsname:
        candidates.append(f"{modname}.{clsname}.{target}")
    if modname:
        candidates.append(f"{modname}.{target}")
        if target.startswith("."):
            candidates.append(modname + target)
        # a sibling module's name, as the code imports it (``fused.edges`` in hpcsuite.les.x)
        candidates.append(f"{modname.rpartition('.')[0]}.{target}")
    documented = _documented(env)
    for cand in candidates:
        if not cand.lstrip(".").startswith("hpcsuite"):
            continue
        obj = _import_path(cand, module=node.get("reftype") == "mod")
        if obj is None or not _trackable(obj) or id(obj) not in documented:
            continue
        fullname, entry = documented[id(obj)]
        from sphinx.util.nodes import make_refnode
        return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, fullname)
    return None


# -- napoleon and attribute docstrings -----------------------------------------------------------------
# napoleon reads the first line of an attribute's or property's docstring as ``type: description``
# when it holds a colon; hpcsuite's docstrings do not use that convention ("Local shape: a cell
# array ..."), so an empty reST comment is put in front of such docstrings before napoleon sees them
# (napoleon skips blank lines, not comments; the comment renders as nothing).

def _no_inline_attribute_type(app, what, name, obj, options, lines):
    if what in ("attribute", "property", "data") and lines and ":" in lines[0]:
        lines[:0] = ["..", ""]


def setup(app):
    app.add_directive("hpcsuite-cli", CliDirective)
    app.add_directive("hpcsuite-decks", DecksDirective)
    app.add_directive("hpcsuite-modules", ModulesDirective)
    app.add_directive("hpcsuite-exports", ExportsDirective)
    app.connect("builder-inited", _reset)
    app.connect("missing-reference", _resolve_alias)
    app.connect("autodoc-process-docstring", _no_inline_attribute_type, priority=400)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

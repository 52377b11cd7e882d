"""The package's import structure: no import circles, no private names taken across modules, and
dependencies that point down the layers of ``ARCHITECTURE`` (README).

Read from the source with :mod:`ast` (nothing is imported), so a new circle, a new
``from .other import _private`` (or ``other._private`` through an imported module) or a new upward
import fails here, with the file and line. Allowed exceptions are listed below, each with why.

Layers, bottom to top::

    runtime <- pgas <- accel / linalg / solvers <- les
    runtime <- deck, shipped <- staging, jobs
    tune observes runtime, pgas, accel, linalg, solvers (nothing below imports tune)
    cli, apps, apprunner and info sit on top; the package's __init__ (the version) imports nothing
"""
from __future__ import annotations

import ast

from package_source import PACKAGE, package_modules

NAME = PACKAGE.name

_NUMERIC = {"runtime", "pgas", "accel", "linalg", "solvers"}

#: layer (first component under hpcsuite) -> the other layers it may import; None: any (the top)
MAY_IMPORT: dict[str, set[str] | None] = {
    "runtime": set(),
    "pgas": {"runtime"},
    "accel": {"runtime", "pgas"},
    "linalg": {"runtime", "pgas", "accel"},
    "solvers": {"runtime", "pgas", "accel"},
    "les": _NUMERIC,
    "tune": _NUMERIC,                 # observes communication and kernels through runtime's hooks
    "deck": {"runtime"},              # the TOML input decks
    "shipped": {"runtime"},           # files shipped in the wheel (inputs/, jobscripts/)
    "staging": {"runtime"},
    # jobs.render renders the sbatch templates shipped in the wheel: it finds them through shipped
    "jobs": {"runtime", "shipped"},
    "info": None,                     # `hpcsuite info`: reports on every layer
    "apprunner": None,
    "apps": None,
    "cli": None,
    # hpcsuite/__init__.py holds the version only: it imports nothing, and any layer may read
    # ``__version__`` from it (jobs.render writes it into job scripts)
    "": set(),
}

#: (importing module, imported module): upward imports allowed for now, each with why
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {
    # The site file is TOML checked with the decks' schema helpers (hpcsuite.deck). deck itself
    # imports only runtime.errors, so this makes no circle; moving the schema helpers into runtime
    # would end the edge.
    ("hpcsuite.runtime.site", "hpcsuite.deck"): "the site file's schema checks are the decks'",
    # The SLURM environment (this node's name and address, SlurmEnv) lives in jobs.env; staging needs
    # it to place its daemons. Issue 22 item 4 moves it into one launcher-environment module in
    # runtime, which ends these edges; until then staging reads it from jobs.
    ("hpcsuite.staging.agent", "hpcsuite.jobs.env"): "SLURM environment, until it moves to runtime",
    ("hpcsuite.staging.ceph", "hpcsuite.jobs.env"): "SLURM environment, until it moves to runtime",
    ("hpcsuite.staging.deployment", "hpcsuite.jobs.env"): "SLURM environment, until it moves to runtime",
    ("hpcsuite.staging.preflight", "hpcsuite.jobs.env"): "SLURM environment, until it moves to runtime",
}

#: "module uses other.name": private names used across modules, each with why
PRIVATE_EXCEPTIONS: dict[str, str] = {
    # the agent records its own /proc start time as the other processes' are recorded; issue 22
    # item 6 replaces procs' /proc parsing with psutil, which ends this use
}


def _resolve(mod: str, level: int, name: str | None, is_pkg: bool) -> str:
    if level == 0:
        return name or ""
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _scan():
    """``(imports, private)``: every import of the package as ``(module, target, line)`` (target a
    module, or a package for names taken from its ``__init__``) and every private name one module
    takes from another as ``"module uses other.name (line N)"``."""
    mods = package_modules(PACKAGE)        # (read at each call: the self-test below swaps PACKAGE)
    imports, private = [], []
    for mod, f in mods.items():
        is_pkg = f.name == "__init__.py"
        tree = ast.parse(f.read_text(), str(f))
        aliases = {}                               # local name -> package module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == NAME or a.name.startswith(NAME + "."):
                        imports.append((mod, a.name, node.lineno))
                        if a.asname and a.name in mods:
                            aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(mod, node.level, node.module, is_pkg)
                if not (target == NAME or target.startswith(NAME + ".")):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:                # a module: `from . import fused`
                        imports.append((mod, sub, node.lineno))
                        aliases[a.asname or a.name] = sub
                        continue
                    imports.append((mod, target, node.lineno))
                    if a.name.startswith("_") and not a.name.startswith("__") and target != mod:
                        private.append((f"{mod} uses {target}.{a.name}", node.lineno))
        for node in ast.walk(tree):                # other._name through an imported module
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                other = aliases.get(node.value.id)
                if other and other != mod and node.attr.startswith("_") and not node.attr.startswith("__"):
                    private.append((f"{mod} uses {other}.{node.attr}", node.lineno))
    return mods, imports, private


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_circles():
    """No two modules of the package import each other, directly or through others.

    Edges to a package's ``__init__`` are left out (as in ``shared/tools/imports_check.py``): a
    package re-exports its modules' names, and its modules take those names from each other, not
    from it; the layer test below counts them.
    """
    mods, imports, _ = _scan()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, target, _line in imports:
        if target in mods and target != mod and mods[target].name != "__init__.py":
            edges[mod].add(target)
    # strongly connected components (Tarjan, iterative)
    index, low, on, stack, circles, counter = {}, {}, set(), [], [], [0]
    for root in mods:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    circles.append(" <-> ".join(sorted(comp)))
    assert not circles, "import circles (move what the modules share into a module below both):\n" \
        + "\n".join(circles)


def test_no_private_names_across_modules():
    """No module takes another module's ``_private`` name, except as listed (with why) above."""
    _, _, private = _scan()
    found = [f"{what} (line {line})" for what, line in private if what not in PRIVATE_EXCEPTIONS]
    assert not found, "private names used across modules (make them a documented interface):\n" \
        + "\n".join(found)
    stale = set(PRIVATE_EXCEPTIONS) - {what for what, _ in private}
    assert not stale, f"exceptions that no longer occur (remove them): {sorted(stale)}"


def test_dependencies_point_down_the_layers():
    """Every import of another layer is one that ``MAY_IMPORT`` allows (or a listed exception);
    nothing below the top imports ``tune``, ``cli``, ``apps`` or ``apprunner``."""
    mods, imports, _ = _scan()
    unknown = sorted({_layer(m) for m in mods} - set(MAY_IMPORT))
    assert not unknown, f"new top-level parts of {NAME}: say in MAY_IMPORT what they may import: {unknown}"
    wrong, used = [], set()
    for mod, target, line in imports:
        src, dst = _layer(mod), _layer(target)
        allowed = MAY_IMPORT[src]
        if src == dst or allowed is None or dst in allowed or dst == "":
            continue
        key = (mod, target)
        if key in LAYER_EXCEPTIONS:
            used.add(key)
            continue
        wrong.append(f"{mod} (line {line}) imports {target}: {src} may import only "
                     f"{', '.join(sorted(allowed)) or 'nothing else'}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
    assert not set(LAYER_EXCEPTIONS) - used, \
        f"exceptions that no longer occur (remove them): {sorted(set(LAYER_EXCEPTIONS) - used)}"
    top_only = {"tune", "cli", "apps", "apprunner"}
    below = [layer for layer, allowed in MAY_IMPORT.items() if allowed is not None and allowed & top_only]
    assert not below, f"layers allowed to import the top: {below}"


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """The scan finds a circle, a private import (both kinds) and an upward import when they are
    there: a small package written for the purpose."""
    pkg = tmp_path / NAME
    for d in ("runtime", "les"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "runtime" / "a.py").write_text("from ..les import b\n_x = 1\n")
    (pkg / "les" / "b.py").write_text("from ..runtime.a import _x\nfrom ..runtime import a\nprint(a._x)\n")
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    _, imports, private = _scan()
    assert (f"{NAME}.runtime.a", f"{NAME}.les.b", 1) in imports
    assert {what for what, _ in private} == {f"{NAME}.les.b uses {NAME}.runtime.a._x"}
    assert len(private) == 2
    try:
        test_no_import_circles()
    except AssertionError as exc:
        assert f"{NAME}.les.b <-> {NAME}.runtime.a" in str(exc)
    else:
        raise AssertionError("the circle was not found")
    try:
        test_dependencies_point_down_the_layers()
    except AssertionError as exc:
        assert f"{NAME}.runtime.a (line 1) imports {NAME}.les.b" in str(exc)
    else:
        raise AssertionError("the upward import was not found")

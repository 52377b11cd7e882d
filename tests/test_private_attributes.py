"""No module reaches into another module's objects through their private attributes.

``tests/test_layers.py`` keeps private *names* from being imported across modules; this keeps
private *attributes* from being used across modules: ``x._name`` where ``x`` is not ``self`` or
``cls``. Read from the source with :mod:`ast` (nothing is imported), with the file and line of each
use. A module offers what others need under a documented name instead (``DistArray``'s internal
interface: ``segment``, ``device_storage``, ``host_local``, ``mpitype``, ``check_alive``, ...;
``Team.derived`` for communicators kept with a team). Two rules:

- **The core classes** (``DistArray``, ``Segment``, ``Team`` / ``ProcessGrid``, ``Pattern``): none of
  their private members (``self._x`` set in their methods, ``_x`` defined in their bodies) is read or
  written as ``x._x`` outside the module that defines the class, whatever ``x`` is.
- **Everything else**: ``x._name`` is allowed only where the same module defines ``_name`` itself
  (its own class's attribute or method, or a module-level name): a private attribute of another
  module's object (or of a third-party module) fails.

Exceptions are listed below, each with why, and fail the test once they no longer occur. The rules
cannot see ``getattr(x, "_name")`` with a string, nor tell two classes' same-named privates apart
in a module that defines one of them (the second rule then allows it; the first still catches the
core classes' names).
"""
from __future__ import annotations

import ast
import functools

from package_source import PACKAGE, package_modules

#: module -> the classes in it whose private members no other module may touch
CORE = {
    "hpcsuite.pgas.array": ("DistArray",),
    "hpcsuite.pgas.memory": ("Segment",),
    "hpcsuite.runtime.team": ("Team", "ProcessGrid"),
    "hpcsuite.pgas.pattern": ("Pattern",),
}

#: "module: receiver._name" -> why it is allowed (for now)
EXCEPTIONS: dict[str, str] = {
    # third-party private names that are the documented or only way
    "hpcsuite.runtime.errors: os._exit": "os._exit is the documented way to end a process "
                                         "without cleanup (after MPI_Abort)",
    "hpcsuite.pgas.numpy_api: np._NoValue": "NumPy's 'not passed' sentinel: keyword defaults "
                                            "NumPy's own functions take (as NumPy's wrappers do)",
    "hpcsuite.pgas.reductions: np._NoValue": "NumPy's 'not passed' sentinel (as in numpy_api)",
    "hpcsuite.pgas.array: MPI._typedict": "mpi4py's predefined datatype per NumPy type character: "
                                          "tells a predefined type (never freed) from a derived one",
    # the LES and staging (other owners)
    "hpcsuite.les.io: store._make": "FieldStore's array factory; to become a documented method "
                                    "of les.state",
    "hpcsuite.les.subgrid: ctx._subgrid_geo": "a cache the subgrid closure hangs on the model "
                                              "context; to become a field of the context",
    "hpcsuite.staging.agent: popen._reported": "a mark on subprocess.Popen objects of its own; "
                                               "issue 22 item 6 (psutil) replaces the loop",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own(node) -> bool:
    """``self._x`` / ``cls._x``: a class's access to its own members."""
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _class_privates(tree: ast.Module, names) -> set[str]:
    """The private members of the classes ``names`` in ``tree``: defined in the class body or set
    on ``self``/``cls`` in its methods."""
    out = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in names):
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(node.name):
                out.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(t, ast.Name) and _private(t.id):
                        out.add(t.id)
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and _own(node) and _private(node.attr):
                out.add(node.attr)
    return out


def _defined_here(tree: ast.Module) -> set[str]:
    """Every name the module defines: attributes set or read on ``self``/``cls``, functions,
    classes and assigned names."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _own(node):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


def _uses(mod: str, tree: ast.Module, foreign: set[str]):
    """``(core, other)`` uses in one module: ``(module, "receiver._name", line)`` of the names in
    ``foreign`` (the core classes' private members from other modules), and of private attributes
    the module does not define itself."""
    here = _defined_here(tree)
    core, other = [], []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)) or _own(node):
            continue
        use = (mod, f"{ast.unparse(node.value)}.{node.attr}", node.lineno)
        if node.attr in foreign:
            core.append(use)
        elif node.attr not in here:
            other.append(use)
    return core, other


@functools.lru_cache(maxsize=1)
def _scan() -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """``(core, other)`` over the whole package (see :func:`_uses`)."""
    mods = package_modules(PACKAGE)
    trees = {m: ast.parse(f.read_text(), str(f)) for m, f in mods.items()}
    core_names = {m: _class_privates(trees[m], classes) for m, classes in CORE.items()}
    core, other = [], []
    for mod, tree in trees.items():
        foreign = set().union(*(names for m, names in core_names.items() if m != mod))
        c, o = _uses(mod, tree, foreign)
        core += c
        other += o
    return core, other


def test_the_core_classes_list_their_private_members():
    # control: the scan finds what the classes hold (a renamed class would leave the rule empty)
    mods = package_modules(PACKAGE)
    for mod, classes in CORE.items():
        names = _class_privates(ast.parse(mods[mod].read_text()), classes)
        assert names, f"{mod}: no private members found in {classes}"
    array = _class_privates(ast.parse(mods["hpcsuite.pgas.array"].read_text()), ("DistArray",))
    assert {"_seg", "_dev_storage", "_mpitype", "_local", "_freed"} <= array


def test_no_private_attribute_is_used_across_modules():
    core, other = _scan()
    bad = [f"{m}:{line}: {u}" for m, u, line in core + other if f"{m}: {u}" not in EXCEPTIONS]
    assert not bad, ("private attributes used across modules (offer a documented name, or add an "
                     "exception with why to EXCEPTIONS):\n" + "\n".join(bad))


def test_every_exception_still_occurs():
    core, other = _scan()
    seen = {f"{m}: {u}" for m, u, _ in core + other}
    stale = sorted(set(EXCEPTIONS) - seen)
    assert not stale, "exceptions that no longer occur (remove them): " + ", ".join(stale)


def test_the_scan_catches_both_kinds_of_use():
    # control on a made-up module: a core class's private is caught even where the module has a
    # private of the same name; another object's private is caught unless the module defines it
    src = ("class H:\n"
           "    def __init__(self, a, b):\n"
           "        self._seg = a._seg\n"
           "        self.n = b._count\n"
           "        self._own = 1\n"
           "\n"
           "    def same(self, other):\n"
           "        return other._own + self._seg.size\n")
    core, other = _uses("hpcsuite.made_up", ast.parse(src), {"_seg", "_alive"})
    assert [u for _, u, _ in core] == ["a._seg"]
    assert [(u, line) for _, u, line in other] == [("b._count", 4)]

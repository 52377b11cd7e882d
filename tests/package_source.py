"""The package's modules as source files, for the tests that read the source with :mod:`ast`
(``test_layers``, ``test_private_attributes``): nothing is imported, here or by this module."""
from __future__ import annotations

from pathlib import Path

#: the package's folder
PACKAGE = Path(__file__).resolve().parents[1] / "hpcsuite"


def package_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """``{dotted module name: source file}`` for every ``.py`` under ``package`` (sorted by path;
    a package's ``__init__.py`` under the package's own name, e.g. ``hpcsuite.les``)."""
    mods = {}
    for f in sorted(package.rglob("*.py")):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods

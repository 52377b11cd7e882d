"""The wheel's packages (everything else is in pyproject.toml).

Every package under ``hpcsuite/``, plus the top-level ``inputs/`` and ``jobscripts/`` folders mapped
into the wheel as ``hpcsuite.inputs`` and ``hpcsuite.jobscripts`` (their subfolders as subpackages),
so that an installed hpcsuite reads its example decks and batch templates with
``importlib.resources`` while the repository keeps one copy of each file where the design puts it.
pyproject.toml alone cannot combine package discovery with such a mapping. In an editable install
(``pip install -e``) the mapped packages resolve to the repository's folders (their
``__init__.py`` makes that work with setuptools' editable finder).
"""
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
# package -> (folder, data files shipped from it and from each of its subfolders)
DATA = {
    "hpcsuite.inputs": ("inputs", ["*.toml", "*.mtx", "*.inp.*"]),
    "hpcsuite.jobscripts": ("jobscripts", ["*.sbatch", "*.sh"]),
}

packages = find_packages(where=str(ROOT), include=["hpcsuite", "hpcsuite.*"])
package_dir, package_data = {}, {}
for pkg, (folder, patterns) in DATA.items():
    package_dir[pkg] = folder
    subs = [()] + sorted(p.relative_to(ROOT / folder).parts for p in (ROOT / folder).rglob("*")
                         if p.is_dir() and p.name != "__pycache__")
    for parts in subs:
        name = ".".join((pkg,) + parts)
        packages.append(name)
        package_data[name] = patterns

# data files inside the package itself: the DALES BOMEX reference series (hpcsuite.les.cases)
package_data["hpcsuite.les"] = ["data/*.csv"]

setup(packages=packages, package_dir=package_dir, package_data=package_data)

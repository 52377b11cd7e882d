"""Sphinx configuration of hpcsuite's documentation.

Build (warnings are errors, every cross-reference must resolve)::

    .venv/bin/python -m sphinx -W --keep-going -n -b html docs docs/_build/html

``tests/test_docs.py`` runs exactly this build in CI.

Intersphinx and no network: the build must not download anything (CI machines and cluster login
nodes often have no internet, and a build that passes or fails with the network is not a check).
NumPy, SciPy, mpi4py, h5py and CuPy do not ship their ``objects.inv`` inventories in their wheels,
so there is nothing local to point intersphinx at by default. We therefore

* use intersphinx for a project only when its inventory file is present in ``docs/_inv/NAME.inv``
  (download them yourself, e.g. ``curl -o docs/_inv/numpy.inv https://numpy.org/doc/stable/objects.inv``),
  or for all of them from the network when ``HPCSUITE_DOCS_INTERSPHINX=online`` is set;
* otherwise leave references to those five projects unresolved on purpose: they are listed in
  ``nitpick_ignore_regex`` below (only names under ``numpy``, ``scipy``, ``mpi4py``, ``h5py``,
  ``cupy``, ``cupyx`` and the standard library), so they render as plain text, while every reference
  to hpcsuite's own objects must resolve or the build fails.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import hpcsuite  # noqa: E402

project = "hpcsuite"
author = "hpcsuite developers"
copyright = "hpcsuite developers"
release = version = hpcsuite.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "myst_parser",
    "hpcsuite_docs",          # docs/_ext/hpcsuite_docs.py: the CLI and deck reference, generated
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_inv", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []
html_theme = "alabaster"
html_static_path: list[str] = []
html_theme_options = {"description": "MPI-parallel scientific computing in Python", "fixed_sidebar": True}

# -- myst (the guides are Markdown) ---------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- autodoc / napoleon ---------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "none"      # the NumPy-style docstrings give the types; annotations such as
#                                  "pgas.DistArray" under TYPE_CHECKING would be unresolvable references
autosummary_generate = False
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_param = False       # parameter types stay text: "int, optional" is not a class
napoleon_use_rtype = False
napoleon_use_ivar = False
# "Attributes" sections read like "Parameters": their types are text ("(n, k) ndarray"), not references
napoleon_custom_sections = [("Attributes", "params_style")]

# -- cross-references must resolve --------------------------------------------------------------------
nitpicky = True
_EXTERNAL = {
    "python": "https://docs.python.org/3",
    "numpy": "https://numpy.org/doc/stable",
    "scipy": "https://docs.scipy.org/doc/scipy",
    "mpi4py": "https://mpi4py.readthedocs.io/en/stable",
    "h5py": "https://docs.h5py.org/en/stable",
    "cupy": "https://docs.cupy.dev/en/stable",
}
_online = os.environ.get("HPCSUITE_DOCS_INTERSPHINX") == "online"
intersphinx_mapping = {}
for _name, _url in _EXTERNAL.items():
    _inv = HERE / "_inv" / f"{_name}.inv"
    if _online:
        intersphinx_mapping[_name] = (_url, None)
    elif _inv.is_file():
        intersphinx_mapping[_name] = (_url, str(_inv))
intersphinx_timeout = 10
_offline = [n for n in _EXTERNAL if n not in intersphinx_mapping]
nitpick_ignore_regex = []
_modules = {"python": r"(builtins|typing|collections|pathlib|argparse|types|enum|dataclasses|"
                      r"concurrent|threading|subprocess|io|os|contextlib|abc|importlib|signal|json|functools)",
            "numpy": "numpy", "scipy": "scipy", "mpi4py": "mpi4py", "h5py": "h5py",
            "cupy": "(cupy|cupyx)"}
for _name in _offline:
    nitpick_ignore_regex.append((r"py:.*", _modules[_name] + r"(\..*)?"))

# Broken references in files that other work owned while this configuration was written; each is a
# docstring to fix in that file, after which its entry here should go (the build says nothing about
# an entry that no longer matches, so check with a build without them now and then).
nitpick_ignore = [
    # hpcsuite/tune/targets.py: the module docstring names Target.run / Target.prepare, which have no
    # docstrings (so are not documented)
    ("py:meth", "Target.run"), ("py:meth", "Target.prepare"),
    # hpcsuite/solvers/stencil.py: StencilSolver.stats is an attribute without documentation
    ("py:attr", "StencilSolver.stats"), ("py:attr", "stats"), ("py:meth", "run"),
    # hpcsuite/staging/store.py: Store.posix refers to :meth:`path` (Store.path is not documented)
    ("py:meth", "path"),
    # hpcsuite/les/subgrid.py, advection.py: the operators of hpcsuite.les.ops are registry entries
    # without docstrings of their own
    ("py:data", "ops.strain2"), ("py:data", "ops.momentum_diffusion"), ("py:data", "ops.tke_closure"),
    ("py:data", "ops.face_diffusivities"), ("py:data", "ops.scalar_diffusion"),
    ("py:data", "hpcsuite.les.ops.advection.face_velocities"),
    # hpcsuite/les/statistics.py: zi_dales refers to the private helper _group_sums
    ("py:func", "_group_sums"),
    # hpcsuite/les/cases.py: dales_bomex_series refers to the constant DALES_TMSER (no doc comment)
    ("py:data", "DALES_TMSER"),
]

"""The wheel is the product: built from this tree, installed with ``pip install --target`` (not
editable) and used from a folder outside the checkout, it has every application, every example
deck (with the files they read), every batch template and lib.sh, and renders a clean batch script
for every application. The editable install of the checkout reads the same files from the
top-level folders (one copy of each)."""
import importlib.resources
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow
PARTS = ("setup.py", "pyproject.toml", "README.md", "hpcsuite", "inputs", "jobscripts")


def _source_files(folder: str) -> list[str]:
    """The files of a top-level folder that the wheel must carry (relative to the folder)."""
    return sorted(str(p.relative_to(ROOT / folder)) for p in (ROOT / folder).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for part in PARTS:              # a copy: the build leaves nothing in the checkout
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, src / part, ignore=junk)
        else:
            shutil.copy2(ROOT / part, src / part)
    b = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src),
                        "-w", str(tmp / "dist")], capture_output=True, text=True, timeout=300)
    assert b.returncode == 0, b.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("hpcsuite-*.whl")
    target = tmp / "t"
    i = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert i.returncode == 0, i.stderr[-3000:]
    outside = tmp / "elsewhere"
    outside.mkdir()
    return wheel, target, outside


def cli(installed, *args, check=True):
    _, target, outside = installed
    env = {k: v for k, v in os.environ.items() if k not in ("HPCSUITE_SITE", "HPCSUITE_HOME")}
    env.update(PYTHONPATH=str(target), XDG_CONFIG_HOME=str(outside / "config"))
    p = subprocess.run([sys.executable, "-m", "hpcsuite.cli", *map(str, args)], capture_output=True, text=True,
                       cwd=outside, env=env, timeout=180)
    if check:
        assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-2000:])
    return p


def test_the_wheel_carries_every_file(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in _source_files("hpcsuite"):
        assert f"hpcsuite/{rel}" in names, rel
    for folder in ("inputs", "jobscripts"):
        files = _source_files(folder)
        assert files, folder
        for rel in files:
            assert f"hpcsuite/{folder}/{rel}" in names, (folder, rel)
    assert "hpcsuite/inputs/dales_bomex/prof.inp.001" in names and "hpcsuite/inputs/eigen_spring16.mtx" in names
    assert "hpcsuite/jobscripts/lib.sh" in names and "hpcsuite/jobscripts/stage-epilog.sh" in names
    ep = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(ep).decode()
    apps = sorted(p.stem for p in (ROOT / "hpcsuite" / "apps").glob("*.py") if not p.stem.startswith("_"))
    for app in apps:
        assert f"{app} = hpcsuite.apps.{app}" in text, text
    # nothing of the repository beyond the package
    assert not [n for n in names if not n.startswith(("hpcsuite/", "hpcsuite-"))]


def test_it_is_the_installed_copy_that_runs(installed):
    _, target, _ = installed
    p = cli(installed, "inputs", "--path", "heat3d")
    assert p.stdout.strip() == str(target / "hpcsuite" / "inputs" / "heat3d.toml")
    epilog = target / "hpcsuite" / "jobscripts" / "stage-epilog.sh"
    assert os.access(epilog, os.X_OK), "stage-epilog.sh lost its executable bit"


def test_every_app_lists_and_has_a_template_deck(installed):
    listed = [l.split()[0] for l in cli(installed, "run", "--list").stdout.splitlines()]
    apps = sorted(p.stem for p in (ROOT / "hpcsuite" / "apps").glob("*.py") if not p.stem.startswith("_"))
    assert set(apps) <= set(listed), listed     # (plus any plug-in installed where this runs)
    for app in apps:
        t = cli(installed, "run", "--template", app).stdout
        assert f'name = "{app}"' in t, (app, t[:300])


def test_shipped_decks_check_from_the_installed_package_and_copy(installed):
    _, target, outside = installed
    decks = [l.split()[0] for l in cli(installed, "inputs").stdout.splitlines() if not l.startswith("(")]
    assert decks == sorted(p.stem for p in (ROOT / "inputs").glob("*.toml"))
    for name in ("heat3d", "eigen_mtx", "dales_bomex", "tune_cholesky", "tomo"):
        path = cli(installed, "inputs", "--path", name).stdout.strip()
        c = cli(installed, "run", "--check", path)
        assert c.stdout.strip().startswith(f"{path}: OK"), c.stdout
    cli(installed, "inputs", "--copy", "decks")
    copied = sorted(str(p.relative_to(outside / "decks")) for p in (outside / "decks").rglob("*") if p.is_file())
    assert copied == [f for f in _source_files("inputs") if f != "__init__.py"]
    # a copied deck finds the files it reads beside it
    for name in ("eigen_mtx", "dales_bomex"):
        c = cli(installed, "run", "--check", f"decks/{name}.toml")
        assert c.stdout.strip().startswith(f"decks/{name}.toml: OK"), c.stdout
    again = cli(installed, "inputs", "--copy", "decks", "heat3d", check=False)
    assert again.returncode == 2 and "decks/heat3d.toml exists (give --force" in again.stderr
    cli(installed, "inputs", "--copy", "decks", "heat3d", "--force")


def test_every_app_renders_a_clean_batch_script(installed):
    _, target, outside = installed
    listing = cli(installed, "jobscript", "--list").stdout.splitlines()
    variants = {l.split()[0]: [v.strip() for v in l.split(None, 1)[1].split("(")[0].split(",")] for l in listing}
    apps = sorted(p.stem for p in (ROOT / "hpcsuite" / "apps").glob("*.py") if not p.stem.startswith("_"))
    assert set(apps) <= set(variants), variants
    assert variants["heat3d"] == ["cpu", "gpu"]
    for app in apps:
        for variant in variants[app]:
            out = outside / f"{app}-{variant}.sbatch"
            cli(installed, "jobscript", app, *(["--gpu", "2"] if variant == "gpu" else []), "-o", out)
            text = out.read_text()
            m = re.search(r"^deck=\$\{1:-(.*)\}$", text, re.M)
            assert m and m.group(1).startswith(str(target / "hpcsuite" / "inputs")), (app, variant)
            assert "jobscripts/lib.sh\"" not in text and "hpcsuite_step" in text
            c = cli(installed, "jobscript", "--check", out)
            assert c.stdout.strip().endswith("0 error(s), 0 warning(s)"), c.stdout


def test_the_editable_install_reads_the_top_level_folders():
    """Where this test runs from the checkout's editable install, the packages hpcsuite.inputs and
    hpcsuite.jobscripts are the repository's own folders, not copies."""
    import hpcsuite
    if Path(hpcsuite.__file__).resolve().parent != ROOT / "hpcsuite":
        pytest.skip(f"hpcsuite is not the checkout's editable install here ({hpcsuite.__file__})")
    assert Path(str(importlib.resources.files("hpcsuite.inputs"))).resolve() == ROOT / "inputs"
    assert Path(str(importlib.resources.files("hpcsuite.jobscripts"))).resolve() == ROOT / "jobscripts"
    assert not (ROOT / "hpcsuite" / "inputs").exists() and not (ROOT / "hpcsuite" / "jobscripts").exists()

"""The shipped example decks (hpcsuite.shipped, ``hpcsuite inputs``): listing, the installed files,
copying a deck with the files it reads, and the one-line refusals."""
import subprocess

import pytest

from helpers import HPCSUITE, ROOT
from hpcsuite.runtime import InputError
from hpcsuite.shipped import copy_decks, deck_info, example_decks, real_path


def test_every_deck_is_listed_with_its_application():
    decks = example_decks()
    assert sorted(decks) == sorted(p.stem for p in (ROOT / "inputs").glob("*.toml"))
    assert deck_info(decks["eigen_mtx"])[0] == "eigen" and deck_info(decks["bomex"])[0] == "les"
    assert real_path(decks["heat3d"]).read_bytes() == (ROOT / "inputs" / "heat3d.toml").read_bytes()


def test_a_copied_deck_brings_the_files_it_reads(tmp_path):
    written = copy_decks(tmp_path, ["eigen_mtx", "dales_bomex.toml"])
    rel = sorted(str(p.relative_to(tmp_path)) for p in written)
    assert rel == ["dales_bomex.toml", "dales_bomex/lscale.inp.001", "dales_bomex/prof.inp.001",
                   "eigen_mtx.toml", "eigen_spring16.mtx"]
    for r in rel:
        assert (tmp_path / r).read_bytes() == (ROOT / "inputs" / r).read_bytes(), r
    with pytest.raises(InputError, match=r"eigen_mtx.toml exists \(give --force to overwrite it\)"):
        copy_decks(tmp_path, ["eigen_mtx"])
    copy_decks(tmp_path, ["eigen_mtx"], overwrite=True)
    with pytest.raises(InputError, match=r"inputs: no shipped deck 'nope' \(shipped: advect_sine, bomex"):
        copy_decks(tmp_path, ["nope"])


def test_cli(tmp_path):
    def cli(*args):
        return subprocess.run([HPCSUITE, "inputs", *args], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    p = cli()
    assert p.returncode == 0 and p.stdout.splitlines()[0].split()[:2] == ["advect_sine", "les"]
    p = cli("eigen_mtx", "--path")
    assert p.returncode == 0 and p.stdout.strip() == str(ROOT / "inputs" / "eigen_mtx.toml")
    p = cli("heat3d", "--copy", "d")
    assert p.returncode == 0 and p.stdout.strip() == "copied 1 file(s) into d: heat3d.toml"
    assert (tmp_path / "d" / "heat3d.toml").is_file()
    p = cli("heat3d", "--copy", "d")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "d/heat3d.toml exists" in p.stderr
    p = cli("heat4d")
    assert p.returncode == 2 and p.stderr.startswith("hpcsuite: error: inputs: no shipped deck 'heat4d'")

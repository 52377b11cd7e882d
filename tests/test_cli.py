"""The command line: help, info (compared with the libraries themselves), and bad input at 1 and 4
ranks (exit code 2, one line, printed once)."""
import json

import h5py
import pytest

from helpers import HPCSUITE

GOOD = """[app]
name = "heat3d"
[grid]
nx = 8
ny = 8
nz = 8
[time]
t_end = 0.001
[output]
file = ""
"""


def test_help_explains_itself(run):
    p = run([HPCSUITE, "--help"])
    assert p.returncode == 0
    for word in ("run", "info", "exit codes", "mpiexec -n 4 hpcsuite run"):
        assert word in p.stdout
    p = run([HPCSUITE, "run", "--help"])
    assert p.returncode == 0 and "--quiet" in p.stdout and "--template" in p.stdout
    p = run([HPCSUITE])
    assert p.returncode == 2
    p = run([HPCSUITE, "frobnicate"])
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_info_tells_the_truth(run):
    import h5py
    import numpy
    from mpi4py import MPI
    p = run([HPCSUITE, "info", "--json"])
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["h5py"]["mpi"] is h5py.get_config().mpi is True
    assert info["h5py"]["hdf5"] == h5py.version.hdf5_version
    assert info["numpy"] == numpy.__version__
    assert info["mpi"]["library"].split()[:3] == MPI.Get_library_version().split()[:3]
    assert info["slurm"]["in_job"] is False
    from hpcsuite.runtime import gpu_aware_mpi
    assert info["mpi"]["gpu_aware"] is gpu_aware_mpi()
    forced = json.loads(run([HPCSUITE, "info", "--json"], env={"HPCSUITE_GPU_AWARE_MPI": "1"}).stdout)
    assert forced["mpi"]["gpu_aware"] is True
    text = run([HPCSUITE, "info"]).stdout
    import re
    library = MPI.Get_library_version().replace("\0", "").split("\n")[0]
    assert re.search(r"^parallel HDF5 +yes", text, re.M)
    assert re.search(r"^MPI library +" + re.escape(" ".join(library.split()[:3])), text, re.M)
    assert re.search(rf"^CUDA-aware MPI +{'yes' if gpu_aware_mpi() else 'no'}:", text, re.M)
    # the vendor and srun's plugin: Open MPI starts under srun with pmix, MPICH and its kin with pmi2
    vendor, plugin = ("openmpi", "pmix") if "Open MPI" in library else ("mpich", "pmi2")
    assert info["mpi"]["vendor"] == vendor and info["mpi"]["srun_plugin"] == plugin
    assert re.search(rf"^MPI vendor +{vendor} \(srun needs --mpi={plugin}\)", text, re.M)
    # outside SLURM the launcher is this venv's own mpiexec (scripts/setup.sh's wrapper)
    import os
    import sys
    own = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(own):
        assert info["mpi"]["launcher"] == [own]
        assert re.search(rf"^launcher +{re.escape(own)}; in a SLURM job: srun --mpi={plugin}$", text, re.M)


def test_info_names_the_site_file_and_what_each_part_misses(run, tmp_path):
    """The site file read ($HPCSUITE_SITE here) and, per part of the suite, the package it lacks
    and the extra that brings it: checked with packages hidden from the interpreter."""
    import importlib.util
    import re
    import sys
    site = tmp_path / "site.toml"
    site.write_text("")
    p = run([HPCSUITE, "info", "--json"], env={"HPCSUITE_SITE": str(site)})
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    if importlib.util.find_spec("hpcsuite.runtime.site") is not None:
        assert info["site"]["path"] == str(site)
    assert info["missing"]["GPU (CuPy)"] == ([] if importlib.util.find_spec("cupy") else
                                             ["cupy: pip install 'hpcsuite[gpu]'"])
    for part in ("core: runtime, pgas, solvers", "staging: tmpfs"):
        assert info["missing"][part] == []
    text = run([HPCSUITE, "info"], env={"HPCSUITE_SITE": str(tmp_path / "absent.toml")}).stdout
    assert re.search(r"^site file +none \(.*absent\.toml", text, re.M), text
    if importlib.util.find_spec("hpcsuite.runtime.site") is not None:     # a site's own srun plugin
        site.write_text('[slurm]\nsrun_mpi = "pmix_v4"\n')
        text = run([HPCSUITE, "info"], env={"HPCSUITE_SITE": str(site)}).stdout
        assert re.search(r"^launcher .*\(job scripts: --mpi=pmix_v4, from the site file\)$", text, re.M), text
    # boto3, scikit-image and matplotlib made unfindable: their parts name the extra to install
    blocker = (
        "import sys\n"
        "class B:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('boto3', 'skimage', 'matplotlib'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, B())\n"
        "from hpcsuite.cli import main\n"
        "sys.exit(main(['info', '--json']))\n")
    p = run([sys.executable, "-c", blocker])
    assert p.returncode == 0, p.stderr
    missing = json.loads(p.stdout)["missing"]
    assert missing["staging: s3"] == ["boto3: pip install 'hpcsuite[s3]'"]
    assert missing["tomo application"] == ["skimage: pip install 'hpcsuite[tomo]'"]
    assert missing["plots (les plot, tuner)"] == ["matplotlib: pip install 'hpcsuite[plot]'"]
    assert missing["core: runtime, pgas, solvers"] == []


def test_info_under_mpiexec_prints_once(run):
    p = run([HPCSUITE, "info"], nranks=2)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("MPI library") == 1
    assert "2 rank(s) on 1 node(s)" in p.stdout


def test_list_template_and_check(run, tmp_path):
    p = run([HPCSUITE, "run", "--list"])
    from hpcsuite.apprunner import known_apps
    listed = [line.split()[0] for line in p.stdout.splitlines()]
    assert p.returncode == 0 and listed == known_apps() and "heat3d" in listed
    p = run([HPCSUITE, "run", "--template", "heat3d"])
    assert p.returncode == 0 and 'name = "heat3d"' in p.stdout and "nx = (required)" in p.stdout
    deck = tmp_path / "ok.toml"
    deck.write_text(GOOD)
    p = run([HPCSUITE, "run", "--check", deck])
    assert p.returncode == 0 and "OK (heat3d)" in p.stdout


def _bad_cases(tmp_path):
    cases = {}

    def deck(name, text):
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        return path

    cases["missing"] = (tmp_path / "absent.toml", "absent.toml: no such file")
    cases["not_toml"] = (deck("not_toml", "[grid\nnx=4"), "not_toml.toml: not valid TOML")
    cases["unknown_key"] = (deck("unknown_key", GOOD.replace("nx = 8", "nx = 8\nnxx = 3")),
                            "unknown_key.toml: [grid] unknown key 'nxx'; did you mean 'nx'?")
    cases["wrong_type"] = (deck("wrong_type", GOOD.replace("t_end = 0.001", 't_end = "soon"')),
                           "wrong_type.toml: [time] t_end must be a positive number, got 'soon' (a string)")
    cases["negative"] = (deck("negative", GOOD.replace("nx = 8", "nx = -4")),
                         "negative.toml: [grid] nx must be a positive integer, got -4")
    cases["unstable"] = (deck("unstable", GOOD.replace("t_end = 0.001", "t_end = 0.01\ndt = 0.01")),
                         "unstable.toml: [time] dt = 0.01 is above the stability limit")
    cases["unknown_app"] = (deck("unknown_app", GOOD.replace('"heat3d"', '"heat4d"')),
                            "unknown_app.toml: [app] name 'heat4d' is not a known application (known: ")
    cases["bad_dims"] = (deck("bad_dims", GOOD.replace("[output]", "[decomposition]\ndims = [3, 0, 0]\n[output]")),
                         "bad_dims.toml: [decomposition] dims [3, 0, 0] does not fit")
    return cases


@pytest.mark.parametrize("nranks", [1, 4])
def test_bad_input_exit_2_one_line_once(run, tmp_path, nranks):
    cases = _bad_cases(tmp_path)
    for name, (path, msg) in cases.items():
        p = run([HPCSUITE, "run", path], nranks=nranks, timeout=60)
        assert p.returncode == 2, (name, p.returncode, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, (name, p.stderr)
        assert msg in lines[0], (name, lines[0])
        assert lines[0].startswith("hpcsuite: error: ")
        assert p.stdout == "", (name, p.stdout)


def test_set_overrides_deck_keys_and_is_blamed_for_bad_values(run, tmp_path):
    """``--set TABLE.KEY=VALUE`` changes the run without editing the deck (sweeps, job arrays);
    a bad value is one line on every rank that says which --set gave it, before any computation."""
    deck = tmp_path / "good.toml"
    deck.write_text(GOOD)
    out = tmp_path / "o" / "u.h5"
    p = run([HPCSUITE, "run", deck, "--set", "time.t_end=0.0005", "--set", f"output.file={out}",
             "--set", "grid.nx=10"], nranks=2, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("error at t = 0.0005") == 1 and p.stdout.count("with --set time.t_end=0.0005") == 1
    with h5py.File(out, "r") as f:
        assert f["u"].shape[0] == 10
    for sets, msg in ((["grid.nx=-3"], "[grid] nx must be a positive integer, got -3 (from --set grid.nx=-3)"),
                      (["grid.nxx=3"], "[grid] unknown key 'nxx'; did you mean 'nx'? (from --set grid.nxx=3)"),
                      (["grid.nx=8", "nx=3"], "--set 'nx=3': expected TABLE.KEY=VALUE")):
        p = run([HPCSUITE, "run", deck, *[x for s in sets for x in ("--set", s)]], nranks=2, timeout=60)
        assert p.returncode == 2 and p.stdout == "", (sets, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"hpcsuite: error: {deck}: {msg}"), (sets, p.stderr)


def test_more_ranks_than_cells(run, tmp_path):
    deck = tmp_path / "thin.toml"
    deck.write_text(GOOD.replace("nx = 8", "nx = 2").replace("[output]", "[decomposition]\ndims = [3, 1, 1]\n[output]"))
    p = run([HPCSUITE, "run", deck], nranks=3, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == (f"hpcsuite: error: {deck}: [grid] nx = 2 is smaller than the 3 ranks along x "
                                "of the 3x1x1 process grid; use more cells or fewer ranks")


def test_main_job_runs(run, tmp_path):
    deck = tmp_path / "good.toml"
    deck.write_text(GOOD.replace('file = ""', f'file = "{tmp_path}/o/u.h5"'))
    p = run([HPCSUITE, "run", deck], nranks=4, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("error at t = 0.001") == 1
    assert (tmp_path / "o" / "u.h5").is_file()
    assert [f.name for f in (tmp_path / "o").iterdir()] == ["u.h5"]   # no temporary left behind
    q = run([HPCSUITE, "run", "--quiet", deck], nranks=2, timeout=120)
    assert q.returncode == 0 and q.stdout.strip().startswith("heat3d: error at t") and q.stderr == ""


@pytest.mark.parametrize("argv, starts_mpi", [
    (["jobscript", "heat3d"], False), (["run", "--list"], False), (["run", "--template", "eigen"], False),
    (["inputs"], False), (["info"], True)])
def test_login_node_commands_do_not_start_mpi(tmp_path, argv, starts_mpi):
    """Rendering a script or listing apps on a login node must not become an MPI job; info must."""
    import subprocess
    import sys
    code = ("import sys, contextlib, io\nfrom hpcsuite.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    rc = main(sys.argv[1:])\n"
            "from mpi4py import MPI\nprint(rc, MPI.Is_initialized())\n")
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", str(starts_mpi)], p.stdout + p.stderr

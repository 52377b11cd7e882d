"""runtime.launcher: vendors from library strings, the srun plugin per vendor, rank and ranks per
node from every launcher's variables, the launcher command, srun --mpi=list parsing; and (under
mpiexec) that the environment's answers agree with MPI itself, on whichever MPI this venv runs."""
import os
import stat
import sys

import pytest

from hpcsuite.runtime import launcher
from hpcsuite.runtime.launcher import (RANK_VARS, env_local_size, env_rank, launcher_command,
                                       mpi_library_version, mpi_vendor, srun_mpi_plugin,
                                       srun_mpi_plugins, vendor_of)
from helpers import ROOT

# First lines of MPI_Get_library_version as these libraries print them.
LIBRARY_STRINGS = {
    "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022": "openmpi",
    "Open MPI v5.0.3, package: Open MPI builder Distribution, ident: 5.0.3": "openmpi",
    "MPICH Version:\t4.0.2": "mpich",
    "MPICH Version:      3.4a2 MPICH Release date: Thu Apr 2 2020 MPICH ABI: 0:0:0 CRAY MPICH": "cray",
    "Intel(R) MPI Library 2021.10 for Linux* OS": "intel",
    "MVAPICH2 Version      :\t2.3.7": "mvapich",
    "MVAPICH Version:\t3.0": "mvapich",
    "Microsoft MPI 10.1": "unknown",
}


@pytest.mark.parametrize("text,vendor", LIBRARY_STRINGS.items())
def test_vendor_of_library_strings(text, vendor):
    assert vendor_of(text) == vendor


def test_srun_plugin_per_vendor():
    assert srun_mpi_plugin("openmpi") == "pmix"
    for v in ("mpich", "intel", "cray", "mvapich", "unknown"):
        assert srun_mpi_plugin(v) == "pmi2"


def test_this_library_is_the_venvs():
    """The venv's own MPI: the library string names the vendor that scripts/setup.sh built for,
    and has no stray NUL (Open MPI's string ends with one)."""
    from mpi4py import MPI
    text = mpi_library_version()
    assert "\0" not in text and "\n" not in text
    assert text.split()[:2] == MPI.Get_library_version().replace("\0", "").split()[:2]
    venv = os.path.basename(os.path.dirname(os.path.dirname(sys.executable)))
    expected = {".venv": "mpich", ".venv-openmpi": "openmpi"}.get(venv)
    if expected is None:
        pytest.skip(f"not one of scripts/setup.sh's venvs ({venv}): no vendor to expect")
    assert mpi_vendor() == expected


def test_library_version_needs_no_mpi_init(run):
    """With MPI initialisation switched off (as a login-node command would), the vendor and the srun
    plugin are still known, and MPI stays uninitialised."""
    code = ("import mpi4py; mpi4py.rc.initialize = False\n"
            "from hpcsuite.runtime.launcher import mpi_vendor, srun_mpi_plugin\n"
            "from mpi4py import MPI\n"
            "print(mpi_vendor(), srun_mpi_plugin(), MPI.Is_initialized())\n")
    p = run([sys.executable, "-c", code])
    assert p.returncode == 0, p.stderr
    vendor, plugin, initialised = p.stdout.split()
    assert vendor == mpi_vendor() and plugin == srun_mpi_plugin() and initialised == "False"


@pytest.mark.parametrize("env,rank", [
    ({}, 0),
    ({"PMI_RANK": "3"}, 3),                                   # MPICH Hydra, srun --mpi=pmi2
    ({"OMPI_COMM_WORLD_RANK": "2", "PMIX_RANK": "2"}, 2),     # Open MPI's mpiexec
    ({"PMIX_RANK": "5"}, 5),                                  # srun --mpi=pmix
    ({"SLURM_PROCID": "7"}, 7),                               # plain srun
    ({"SLURM_PROCID": "0", "PMI_RANK": "1"}, 1),              # mpiexec inside a job's batch step
    ({"PMI_RANK": "x", "SLURM_PROCID": "4"}, 4),              # garbage is skipped
])
def test_env_rank(env, rank):
    assert env_rank(env) == rank


@pytest.mark.parametrize("env,size", [
    ({}, 1),
    ({"MPI_LOCALNRANKS": "4"}, 4),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 3),
    ({"PMIX_LOCAL_SIZE": "2"}, 2),
    ({"SLURM_TASKS_PER_NODE": "4(x2),1"}, 4),
    ({"SLURM_TASKS_PER_NODE": "4(x2),1", "SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_NODEID": "2"}, 1),
    ({"SLURM_STEP_TASKS_PER_NODE": "2,3", "SLURM_NODEID": "1"}, 3),
    ({"SLURM_TASKS_PER_NODE": "bad"}, 1),
])
def test_env_local_size(env, size):
    assert env_local_size(env) == size


def test_launcher_command_inside_and_outside_slurm():
    assert launcher_command({"SLURM_JOB_ID": "1"}, vendor="mpich") == ["srun", "--mpi=pmi2"]
    assert launcher_command({"SLURM_JOB_ID": "1"}, vendor="openmpi") == ["srun", "--mpi=pmix"]
    outside = launcher_command({}, vendor="mpich")
    own = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(own):
        assert outside == [own]
    else:
        assert outside[0].startswith("mpiexec")


def _fake_srun(tmp_path, text, rc=0):
    exe = tmp_path / "srun"
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}\nEOF\nexit {rc}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_srun_mpi_list_parsing(tmp_path, monkeypatch):
    # Slurm 22.05's own output, as printed on this machine
    _fake_srun(tmp_path, "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
                         "specific pmix plugin versions available: pmix_v4")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    plugins, why = srun_mpi_plugins()
    assert plugins == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"] and why == ""
    _fake_srun(tmp_path, "srun: fatal: Could not establish a configuration source", rc=1)
    plugins, why = srun_mpi_plugins()
    assert plugins is None and "Could not establish a configuration source" in why
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert srun_mpi_plugins() == (None, "srun not found on PATH")


def test_rank_output_script_reads_the_same_variables():
    """scripts/rank_output.sh (a shell script: it cannot import this module) reads the launcher's
    rank variables in RANK_VARS's order."""
    text = (ROOT / "scripts/rank_output.sh").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("rank="))
    positions = [line.find("${" + v) for v in RANK_VARS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), line


def test_module_knows_every_vendor_variable_the_package_uses():
    """No other module of the package reads a vendor's rank variables itself."""
    pkg = ROOT / "hpcsuite"
    offenders = []
    for f in pkg.rglob("*.py"):
        if f.name == "launcher.py":
            continue
        text = f.read_text()
        for var in ("PMI_RANK", "OMPI_COMM_WORLD", "PMIX_RANK", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"):
            if var in text:
                offenders.append(f"{f.relative_to(ROOT)}: {var}")
    assert not offenders, offenders


@pytest.mark.mpi
def test_environment_agrees_with_mpi(team):
    """Under mpiexec (either vendor's), the launcher's variables give the world rank and the ranks
    on this node that MPI itself reports (a COMM_TYPE_SHARED split)."""
    from mpi4py import MPI
    assert env_rank() == MPI.COMM_WORLD.Get_rank()
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        if any(v in os.environ for v in launcher.LOCAL_SIZE_VARS):
            assert env_local_size() == node.Get_size()
    finally:
        node.Free()

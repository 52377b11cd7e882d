"""``hpcsuite --version``: the installed distribution's version, exit 0, without starting MPI."""
import importlib.metadata
import sys

import hpcsuite
from helpers import HPCSUITE, run_cmd


def test_version_matches_the_installed_distribution():
    p = run_cmd([HPCSUITE, "--version"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"hpcsuite {importlib.metadata.version('hpcsuite')}"
    assert hpcsuite.__version__ == importlib.metadata.version("hpcsuite")


def test_version_does_not_start_mpi():
    # the same entry point in a fresh interpreter; afterwards MPI must be neither imported nor
    # initialised (a login node must not become a singleton MPI job to print a version)
    code = ("import sys\nfrom hpcsuite.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "mod = sys.modules.get('mpi4py.MPI')\n"
            "print('MPI', 'initialised' if mod is not None and mod.Is_initialized() else 'not started')\n")
    p = run_cmd([sys.executable, "-c", code])
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "MPI not started", p.stdout

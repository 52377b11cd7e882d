"""hpcsuite: an MPI-parallel scientific computing suite.

Subpackages, from the bottom layer up (each imports only those before it; ``tune`` observes the
others through hooks and nothing imports it):

* :mod:`hpcsuite.runtime` -- teams of MPI ranks, process grids, devices, errors, logging, timers,
  checkpoints
* :mod:`hpcsuite.pgas` -- distributed arrays (global and local view, halos, algorithms,
  redistribution, atomics, parallel HDF5)
* :mod:`hpcsuite.accel`, :mod:`hpcsuite.linalg`, :mod:`hpcsuite.solvers` -- one-source CPU/GPU
  kernels, dense factorizations, stencils, sparse matrices, Krylov solvers, LOBPCG
* :mod:`hpcsuite.les` -- the large-eddy simulation
* :mod:`hpcsuite.tune`, :mod:`hpcsuite.staging`, :mod:`hpcsuite.jobs` -- autotuning, job-temporary
  storage, SLURM job scripts

``import hpcsuite`` itself imports none of them (so it does not start MPI); ``hpcsuite.pgas`` and
the like import on first use.

What is stable: the names each subpackage lists in its ``__all__``, the command line and the deck
keys. Everything else (names only a module defines, private modules) may change between releases.
"""
import importlib as _importlib

__version__ = "0.1.0"
__all__ = ["__version__"]

SUBPACKAGES = ("runtime", "pgas", "accel", "linalg", "solvers", "les", "tune", "staging", "jobs")


def __getattr__(name):
    if name in SUBPACKAGES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(SUBPACKAGES))

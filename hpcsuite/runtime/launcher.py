"""The launcher environment: which MPI this installation runs on, how SLURM must start it, and
what the launcher tells a process about its rank and node, for any MPI vendor.

This is the one place that knows vendors' names and variables; ``cli``, ``jobs``, ``staging`` and
``runtime.waiting`` ask it instead of reading ``PMI_RANK``/``OMPI_*``/``SLURM_*`` themselves.

Examples
--------
>>> vendor_of("Open MPI v4.1.4, package: Debian OpenMPI 4.1.4-3")
'openmpi'
>>> srun_mpi_plugin("openmpi"), srun_mpi_plugin("mpich")
('pmix', 'pmi2')
>>> env_rank({"OMPI_COMM_WORLD_RANK": "3"})
3
"""
from __future__ import annotations

import functools
import os
from typing import Mapping

__all__ = ["VENDORS", "vendor_of", "mpi_library_version", "mpi_vendor", "srun_mpi_plugin", "env_rank",
           "env_local_size"]

# vendor -> (words in MPI_Get_library_version that identify it, srun --mpi plugin it needs under SLURM)
# Cray MPICH, Intel MPI and MVAPICH are MPICH derivatives that speak PMI2 to srun (Cray sites usually
# set cray_shasta as MpiDefault; a site file overrides the plugin for such sites).
VENDORS: dict[str, tuple[tuple[str, ...], str]] = {
    "openmpi": (("Open MPI",), "pmix"),
    "intel": (("Intel(R) MPI", "Intel MPI"), "pmi2"),
    "cray": (("CRAY MPICH", "Cray MPICH"), "pmi2"),
    "mvapich": (("MVAPICH",), "pmi2"),
    "mpich": (("MPICH",), "pmi2"),
}


def vendor_of(library_version: str) -> str:
    """The vendor key (``"openmpi"``, ``"mpich"``, ...) named by an ``MPI_Get_library_version``
    string, or ``"unknown"``. Local."""
    for vendor, (words, _) in VENDORS.items():     # derivatives before plain MPICH: order matters
        if any(w.lower() in library_version.lower() for w in words):
            return vendor
    return "unknown"


@functools.lru_cache(maxsize=None)
def mpi_library_version() -> str:
    """``MPI_Get_library_version()`` of the MPI that mpi4py was built against (first line). Local.

    Allowed before ``MPI_Init`` by the standard, so asking does not start MPI when the caller has
    not (``hpcsuite jobscript`` on a login node must not become a singleton MPI job).
    """
    import mpi4py
    if "mpi4py.MPI" not in __import__("sys").modules:
        mpi4py.rc.initialize = False
    from mpi4py import MPI
    return " ".join(MPI.Get_library_version().split("\n")[0].split())


def mpi_vendor() -> str:
    """The vendor of the MPI this installation runs on (see :func:`vendor_of`). Local."""
    return vendor_of(mpi_library_version())


def srun_mpi_plugin(vendor: str | None = None) -> str:
    """The ``srun --mpi=`` plugin that starts ranks of ``vendor``'s MPI as one job (default: this
    installation's MPI): ``pmix`` for Open MPI, ``pmi2`` for MPICH and its derivatives. Local."""
    vendor = mpi_vendor() if vendor is None else vendor
    return VENDORS.get(vendor, ((), "pmi2"))[1]


# Rank variables by launcher: MPICH Hydra, Open MPI, PMIx launchers, SLURM's srun.
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE")


def env_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's world rank from the launcher's environment, without initialising MPI
    (0 when no launcher says). Local; use ``Team.rank`` once MPI runs."""
    env = os.environ if env is None else env
    for var in _RANK_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    return 0


def env_local_size(env: Mapping[str, str] | None = None) -> int:
    """How many ranks of this job the launcher put on this node, from its environment, without
    initialising MPI (1 when no launcher says). Local."""
    env = os.environ if env is None else env
    for var in _LOCAL_SIZE_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    first = env.get("SLURM_TASKS_PER_NODE", "").split(",")[0].split("(")[0]
    return int(first) if first.isdigit() else 1

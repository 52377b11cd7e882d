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
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping

__all__ = ["VENDORS", "RANK_VARS", "LOCAL_SIZE_VARS", "vendor_of", "mpi_library_version", "mpi_vendor",
           "srun_mpi_plugin", "env_rank", "env_local_size", "in_slurm_job", "launcher_command",
           "srun_mpi_plugins"]

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

    Allowed before ``MPI_Init`` by the standard: a command that must not start MPI (``hpcsuite
    jobscript`` on a login node should not become a singleton MPI job) sets
    ``mpi4py.rc.initialize = False`` before it imports anything of hpcsuite (importing
    ``hpcsuite.runtime`` imports ``mpi4py.MPI``, which initialises MPI by default), and this still
    answers. This function leaves that choice to the caller: switching initialisation off here would
    leave MPI uninitialised for every later user in the process.
    """
    from mpi4py import MPI
    # Open MPI ends the string with a NUL byte
    return " ".join(MPI.Get_library_version().replace("\0", "").split("\n")[0].split())


def mpi_vendor() -> str:
    """The vendor of the MPI this installation runs on (see :func:`vendor_of`). Local."""
    return vendor_of(mpi_library_version())


def srun_mpi_plugin(vendor: str | None = None) -> str:
    """The ``srun --mpi=`` plugin that starts ranks of ``vendor``'s MPI as one job (default: this
    installation's MPI): ``pmix`` for Open MPI, ``pmi2`` for MPICH and its derivatives. Local."""
    vendor = mpi_vendor() if vendor is None else vendor
    return VENDORS.get(vendor, ((), "pmi2"))[1]


# Rank variables by launcher, first found wins: MPICH Hydra (and srun --mpi=pmi2), Open MPI's
# mpiexec, PMIx launchers (srun --mpi=pmix), SLURM's srun. A launcher started inside a SLURM job step
# sets its own variable, which comes before the step's SLURM_PROCID. scripts/rank_output.sh reads
# the same variables in the same order.
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
# Ranks of this job on this node: Hydra, Open MPI's mpiexec, PMIx launchers; then SLURM (below).
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE")


def env_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's world rank from the launcher's environment, without initialising MPI
    (0 when no launcher says). Local; use ``Team.rank`` once MPI runs."""
    env = os.environ if env is None else env
    for var in RANK_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    return 0


def _expand_tasks_per_node(spec: str) -> list[int]:
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]``; ``[]`` when malformed."""
    out: list[int] = []
    for part in spec.split(","):
        count, _, rep = part.partition("(x")
        rep = rep.rstrip(")") if rep else "1"
        if not (count.isdigit() and rep.isdigit()):
            return []
        out += [int(count)] * int(rep)
    return out


def env_local_size(env: Mapping[str, str] | None = None) -> int:
    """How many ranks of this job the launcher put on this node, from its environment, without
    initialising MPI (1 when no launcher says). Local.

    Under ``srun`` without an MPI launcher's variable it is this node's entry of the step's tasks
    per node (``SLURM_STEP_TASKS_PER_NODE`` at ``SLURM_NODEID``), else the job's first entry. Once
    MPI runs, ``Team.node_layout()`` (an ``MPI_COMM_TYPE_SHARED`` split) is the exact answer; this
    is for decisions that must be local and early (``runtime.waiting``).
    """
    env = os.environ if env is None else env
    for var in LOCAL_SIZE_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    nodeid = env.get("SLURM_NODEID", "")
    step = _expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    if step and nodeid.isdigit() and int(nodeid) < len(step):
        return step[int(nodeid)]
    job = _expand_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    return job[0] if job else 1


def in_slurm_job(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs inside a SLURM allocation (``SLURM_JOB_ID`` set). Local."""
    env = os.environ if env is None else env
    return bool(env.get("SLURM_JOB_ID"))


def launcher_command(env: Mapping[str, str] | None = None, vendor: str | None = None) -> list[str]:
    """The command that starts ranks of this installation's MPI here: ``srun --mpi=PLUGIN`` inside
    a SLURM job, else the ``mpiexec`` next to this Python (the venv's, which scripts/setup.sh
    points at the right MPI), else the vendor's own name on ``PATH``. Local.

    Examples
    --------
    >>> launcher_command({"SLURM_JOB_ID": "7"}, vendor="openmpi")
    ['srun', '--mpi=pmix']
    """
    env = os.environ if env is None else env
    if in_slurm_job(env):
        return ["srun", f"--mpi={srun_mpi_plugin(vendor)}"]
    own = Path(sys.executable).parent / "mpiexec"
    if own.exists():
        return [str(own)]
    vendor = mpi_vendor() if vendor is None else vendor
    for name in {"openmpi": ("mpiexec.openmpi",), "mpich": ("mpiexec.mpich", "mpiexec.hydra")}.get(vendor, ()):
        if shutil.which(name):
            return [name]
    return ["mpiexec"]


def srun_mpi_plugins(timeout: float = 10.0) -> tuple[list[str] | None, str]:
    """The ``--mpi`` plugins this site's ``srun --mpi=list`` offers, and a note. Local.

    Returns ``(plugins, "")``, or ``(None, why)`` when ``srun`` is not on ``PATH`` or cannot run
    here (no SLURM configuration reachable, e.g. outside a cluster).
    """
    srun = shutil.which("srun")
    if srun is None:
        return None, "srun not found on PATH"
    try:
        p = subprocess.run([srun, "--mpi=list"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"srun --mpi=list failed ({type(exc).__name__})"
    text = p.stdout + p.stderr
    plugins = []
    for line in text.splitlines():
        word = line.strip()
        if word.startswith("srun:"):          # Slurm < 23: "srun: MPI types are..." / "srun: pmi2"
            word = word[5:].strip()
        if "versions available:" in word:     # "specific pmix plugin versions available: pmix_v4"
            plugins += [v.strip() for v in word.split(":", 1)[1].split(",") if v.strip()]
        elif word and " " not in word and not word.endswith(":"):
            plugins.append(word)
    if p.returncode != 0 or not plugins:
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), f"exit {p.returncode}")
        return None, f"srun --mpi=list failed: {last}"
    return plugins, ""

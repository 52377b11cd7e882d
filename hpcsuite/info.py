"""What this installation can do: versions, MPI, parallel HDF5, GPU, SLURM (``hpcsuite info``).

Every value is read from the library it describes at run time (never from a list kept by hand), so
the report tells the truth about the environment it runs in.
"""
from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata

from . import __version__

SLURM_VARS = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_PARTITION", "SLURM_JOB_NODELIST",
              "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
              "SLURM_PROCID", "SLURM_LOCALID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def collect() -> dict:
    """Gather the report. Collective over the world (it initialises MPI and counts nodes)."""
    import numpy
    import scipy
    from mpi4py import MPI

    from .runtime import Team, gpu_aware_mpi, gpu_status

    team = Team.world()
    node_index, nodes = team.node_layout()
    info = {
        "hpcsuite": {"version": __version__, "path": os.path.dirname(os.path.abspath(__file__))},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "host": {"name": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "mpi": {
            "mpi4py": _version("mpi4py"),
            "library": " ".join(MPI.Get_library_version().split("\n")[0].split()),
            "standard": "%d.%d" % MPI.Get_version(),
            "rank": team.rank, "size": team.size, "nodes": nodes,
            "gpu_aware": gpu_aware_mpi(),
        },
    }
    try:
        import h5py
        info["h5py"] = {"version": h5py.__version__, "hdf5": h5py.version.hdf5_version,
                        "mpi": bool(h5py.get_config().mpi)}
    except ImportError as exc:
        info["h5py"] = {"version": None, "error": str(exc), "mpi": False}
    ok, why = gpu_status()
    info["gpu"] = {"usable": ok, "detail": why, "cupy": _version("cupy-cuda12x") or _version("cupy")}
    info["plot"] = {"matplotlib": _version("matplotlib")}
    slurm = {k: os.environ[k] for k in SLURM_VARS if k in os.environ}
    info["slurm"] = {"in_job": "SLURM_JOB_ID" in os.environ, **slurm}
    return info


def format_info(info: dict) -> str:
    """The report as aligned text."""
    m, h, g = info["mpi"], info["h5py"], info["gpu"]
    rows = [
        ("hpcsuite", f"{info['hpcsuite']['version']} ({info['hpcsuite']['path']})"),
        ("python", f"{info['python']['version']} ({info['python']['executable']})"),
        ("host", f"{info['host']['name']}, {info['host']['cpus']} CPUs, {info['host']['platform']}"),
        ("numpy", info["numpy"]),
        ("scipy", info["scipy"]),
        ("mpi4py", m["mpi4py"]),
        ("MPI library", f"{m['library']} (MPI {m['standard']})"),
        ("MPI job", f"{m['size']} rank(s) on {m['nodes']} node(s)"),
        ("CUDA-aware MPI", "yes: GPU halos and transposes skip the host" if m["gpu_aware"]
         else "no: GPU data is staged through host buffers (HPCSUITE_GPU_AWARE_MPI=1 to force)"),
        ("h5py", f"{h['version']} on HDF5 {h.get('hdf5', '?')}" if h["version"] else f"missing ({h['error']})"),
        ("parallel HDF5", "yes (h5py built with MPI: driver='mpio' works)" if h["mpi"]
         else "NO: h5py was built without MPI; run scripts/setup.sh"),
        ("GPU", ("yes: " if g["usable"] else "no: ") + g["detail"]),
        ("CuPy", g["cupy"] or "not installed"),
        ("matplotlib", info["plot"]["matplotlib"] or "not installed (plots disabled)"),
    ]
    s = info["slurm"]
    if s["in_job"]:
        rows.append(("SLURM job", ", ".join(f"{k}={v}" for k, v in s.items() if k != "in_job")))
    else:
        rows.append(("SLURM job", "not inside a SLURM job"))
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)

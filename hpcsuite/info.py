"""What this installation can do: versions, MPI (vendor, launcher, srun's PMI plugins, CUDA
awareness), parallel HDF5, GPU, the site file, SLURM, and what each part of the suite is missing
(``hpcsuite info``).

Every value is read from the library it describes at run time (never from a list kept by hand), so
the report tells the truth about the environment it runs in.
"""
from __future__ import annotations

import importlib.util
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


# The parts of the suite and the importable modules each needs beyond the core, with where they
# come from. Which extra installs a module is read from runtime.optional.EXTRAS (the same table that
# the one-line "install hpcsuite[...]" errors use).
PARTS = (
    ("core: runtime, pgas, solvers", ("numpy", "scipy", "mpi4py", "h5py")),
    ("fast CPU kernels (numba)", ("numba",)),
    ("staging: tmpfs", ()),
    ("staging: rados, cephfs", ("rados", "cephfs")),
    ("staging: s3", ("boto3",)),
    ("tomo application", ("skimage",)),
    ("plots (les plot, tuner)", ("matplotlib",)),
    ("GPU (CuPy)", ("cupy",)),
)
_NOT_FROM_PIP = {"rados": "Ceph's Python bindings (Debian: python3-rados; PyPI has none)",
                 "cephfs": "Ceph's Python bindings (Debian: python3-cephfs; PyPI has none)"}


def missing_parts() -> dict[str, list[str]]:
    """For each part of the suite, what is missing to use it (empty: ready), each entry naming the
    module and how to get it. Local (looks modules up without importing them)."""
    from .runtime.optional import EXTRAS
    out = {}
    for part, modules in PARTS:
        missing = []
        for mod in modules:
            try:
                found = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
            if found:
                continue
            if mod in _NOT_FROM_PIP:
                missing.append(f"{mod}: {_NOT_FROM_PIP[mod]}")
            elif mod in EXTRAS:
                missing.append(f"{mod}: pip install 'hpcsuite[{EXTRAS[mod][0]}]'")
            else:
                missing.append(f"{mod}: pip install {mod}")
        out[part] = missing
    return out


def site_file() -> dict:
    """The site file this process reads: ``{"path": str | None, "looked_in": [...], "error": str,
    "srun_mpi": str | None}`` (``srun_mpi``: the plugin the site file sets for job scripts). Local."""
    try:
        from .runtime import site
    except ImportError:
        return {"path": None, "looked_in": [], "error": "hpcsuite.runtime.site is not available",
                "srun_mpi": None}
    looked = [str(p) for _, p in site.site_candidates()] if hasattr(site, "site_candidates") else []
    try:
        loaded = site.load_site()
    except Exception as exc:  # noqa: BLE001 - an invalid file: report it, the rest of the report stands
        return {"path": None, "looked_in": looked, "error": str(exc), "srun_mpi": None}
    return {"path": str(loaded.path) if loaded.path else None, "looked_in": looked, "error": "",
            "srun_mpi": getattr(loaded, "srun_mpi", None) or None}


def collect() -> dict:
    """Gather the report. Collective over the world (it initialises MPI and counts nodes)."""
    import numpy
    import scipy
    from mpi4py import MPI

    from .runtime import Team, gpu_aware_mpi, gpu_status
    from .runtime import launcher

    team = Team.world()
    node_index, nodes = team.node_layout()
    # srun --mpi=list runs a program: once, on rank 0 (the only rank that prints)
    plugins, plugins_note = launcher.srun_mpi_plugins() if team.rank == 0 else (None, "")
    info = {
        "hpcsuite": {"version": __version__, "path": os.path.dirname(os.path.abspath(__file__))},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "host": {"name": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "mpi": {
            "mpi4py": _version("mpi4py"),
            "library": launcher.mpi_library_version(),
            "vendor": launcher.mpi_vendor(),
            "standard": "%d.%d" % MPI.Get_version(),
            "rank": team.rank, "size": team.size, "nodes": nodes,
            "gpu_aware": gpu_aware_mpi(),
            "launcher": launcher.launcher_command(),
            "srun_plugin": launcher.srun_mpi_plugin(),
            "srun_plugins": plugins,
            "srun_plugins_note": plugins_note,
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
    from .staging.checksum import describe as staging_checksum
    info["staging"] = {"checksum": staging_checksum()}
    slurm = {k: os.environ[k] for k in SLURM_VARS if k in os.environ}
    info["slurm"] = {"in_job": "SLURM_JOB_ID" in os.environ, **slurm}
    info["site"] = site_file()
    info["missing"] = missing_parts()
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
        ("MPI vendor", f"{m['vendor']} (srun needs --mpi={m['srun_plugin']})"),
        ("launcher", " ".join(m["launcher"]) + (" (inside this SLURM job)" if info["slurm"]["in_job"]
                                                else f"; in a SLURM job: srun --mpi={m['srun_plugin']}")
         + (f" (job scripts: --mpi={info['site']['srun_mpi']}, from the site file)"
            if info["site"]["srun_mpi"] else "")),
        ("srun --mpi=list", ", ".join(m["srun_plugins"]) if m["srun_plugins"]
         else f"unknown ({m['srun_plugins_note']})"),
        ("MPI job", f"{m['size']} rank(s) on {m['nodes']} node(s)"),
        ("CUDA-aware MPI", "yes: GPU halos and transposes skip the host" if m["gpu_aware"]
         else "no: GPU data is staged through host buffers (HPCSUITE_GPU_AWARE_MPI=1 to force)"),
        ("h5py", f"{h['version']} on HDF5 {h.get('hdf5', '?')}" if h["version"] else f"missing ({h['error']})"),
        ("parallel HDF5", "yes (h5py built with MPI: driver='mpio' works)" if h["mpi"]
         else "NO: h5py was built without MPI; run scripts/setup.sh"),
        ("GPU", ("yes: " if g["usable"] else "no: ") + g["detail"]),
        ("CuPy", g["cupy"] or "not installed"),
        ("matplotlib", info["plot"]["matplotlib"] or "not installed (plots disabled)"),
        ("staging checksum", info.get("staging", {}).get("checksum", "?")),
    ]
    s = info["slurm"]
    if s["in_job"]:
        rows.append(("SLURM job", ", ".join(f"{k}={v}" for k, v in s.items() if k != "in_job")))
    else:
        rows.append(("SLURM job", "not inside a SLURM job"))
    site = info["site"]
    if site["path"]:
        rows.append(("site file", site["path"]))
    elif site["error"]:
        rows.append(("site file", f"none ({site['error']})"))
    else:
        rows.append(("site file", "none" + (f" (looked for {', '.join(site['looked_in'])})"
                                            if site["looked_in"] else "")))
    for part, missing in info["missing"].items():
        rows.append((part, "ready" if not missing else "missing " + "; ".join(missing)))
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)

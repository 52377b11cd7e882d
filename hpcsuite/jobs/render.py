"""Rendering batch scripts from the templates (``hpcsuite jobscript APP``).

Templates are ordinary sbatch scripts that work as written from a checkout
(``sbatch jobscripts/heat3d.sbatch``, sourcing ``jobscripts/lib.sh`` there). Rendering changes the
values of their ``#SBATCH`` directives (enabling the disabled ``##SBATCH --partition``/``--account``
lines when given), the default deck, and makes the script self-sufficient: the ``source .../lib.sh``
line becomes the shared functions themselves, the Python environment that rendered the script
(its venv, or the folder of its ``hpcsuite`` command), the ``srun --mpi`` plugin for the MPI that
environment was built against, and the site file's module loads and environment
(:mod:`hpcsuite.runtime.site`). A rendered script runs from any install, wheel or checkout. Every
request is validated before anything is written or queued.

Where templates come from, per application: hpcsuite's own (``hpcsuite.jobscripts``: ``APP.sbatch``
and ``APP-gpu.sbatch``); for an application of another package, the resources its module names in
``JOBSCRIPT`` / ``JOBSCRIPT_GPU`` (paths inside the module's package), else ``jobscripts/APP.sbatch`` /
``jobscripts/APP-gpu.sbatch`` inside its package, else hpcsuite's ``generic.sbatch`` (any
application: the deck is the script's first argument).
"""
from __future__ import annotations

import importlib.resources
import re
import shlex
import shutil
import subprocess
import sys
from importlib.resources.abc import Traversable
from pathlib import Path

from .. import __version__
from ..runtime import InputError
from ..runtime.launcher import mpi_library_version, srun_mpi_plugin, vendor_of
from ..runtime.site import Site, load_site
from ..shipped import example_decks, jobscripts_folder, real_path
from .lint import lint_text, valid_time

__all__ = ["templates", "render", "check_fits", "lib_text", "environment_lines", "srun_mpi_for", "GENERIC"]

GENERIC = "generic"          # the template for applications that bring none
_SOURCE_LIB = re.compile(r'^source[ \t]+"?[^\n]*jobscripts/lib\.sh"?[ \t]*$', re.M)


def lib_text() -> str:
    """The shared shell functions (``jobscripts/lib.sh``) as shipped. Local."""
    return jobscripts_folder().joinpath("lib.sh").read_text(encoding="utf-8")


def templates(apps=None) -> dict[str, dict[str, Traversable]]:
    """``{name: {"cpu": template, "gpu": template}}``. Local.

    hpcsuite's templates (``APP[-gpu].sbatch``, and helpers such as ``tune-collect``), and for each
    application of ``apps`` that has none there, the templates it brings or else the generic one.

    Parameters
    ----------
    apps : dict, optional
        ``{app: {"cpu": template, "gpu": template}}`` of the applications of other packages, with
        the templates each ships (empty when none), as :func:`hpcsuite.apprunner.app_jobscripts`
        gives them.
    """
    out: dict[str, dict[str, Traversable]] = {}
    shipped = sorted((p for p in jobscripts_folder().iterdir() if p.name.endswith(".sbatch")), key=lambda p: p.name)
    for p in shipped:
        name = p.name.removesuffix(".sbatch")
        variant = "gpu" if name.endswith("-gpu") else "cpu"
        out.setdefault(name.removesuffix("-gpu"), {})[variant] = p
    generic = out.pop(GENERIC, {})
    if "cpu" in generic:                      # one template for both: --gpu N adds the GPUs
        generic.setdefault("gpu", generic["cpu"])
    for app, own in (apps or {}).items():
        if app not in out:
            out[app] = dict(own) or dict(generic)
    return dict(sorted(out.items()))


def is_generic(template: Traversable) -> bool:
    """Whether ``template`` is hpcsuite's generic one. Local."""
    return template.name in (f"{GENERIC}.sbatch", f"{GENERIC}-gpu.sbatch")


def _set_directive(text: str, option: str, value) -> str:
    """Set ``#SBATCH --option=value``: replace an active or disabled (``##SBATCH``) line, or add
    one after the last directive."""
    line = f"#SBATCH --{option}={value}"
    pat = re.compile(rf"^#{{1,2}}SBATCH --{re.escape(option)}(=\S*|\s+\S+)?\s*$", re.M)
    if pat.search(text):
        return pat.sub(line, text, count=1)
    lines = text.splitlines()
    last = max(i for i, l in enumerate(lines) if l.startswith(("#SBATCH", "##SBATCH")))
    lines.insert(last + 1, line)
    return "\n".join(lines) + "\n"


def _positive(name: str, v) -> None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        raise InputError(f"jobscript: --{name} must be a positive integer, got {v!r}")


def check_fits(nodes: int, cpus_per_node: int, gpus_per_node: int = 0, partition: str | None = None) -> str | None:
    """Whether a request fits the cluster that ``sinfo`` reports; ``None`` if it fits or no cluster
    is reachable, else the reason. Local (runs ``sinfo``)."""
    if shutil.which("sinfo") is None:
        return None
    cmd = ["sinfo", "-h", "-o", "%D %c %G"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    total_nodes, max_cpus, max_gpus = 0, 0, 0
    for row in out.stdout.split("\n"):
        parts = row.split()
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        total_nodes += int(parts[0])
        max_cpus = max(max_cpus, int(parts[1].rstrip("+")))
        m = re.search(r"gpu(?::[^:,(]+)?:(\d+)", parts[2] if len(parts) > 2 else "")
        max_gpus = max(max_gpus, int(m.group(1)) if m else 0)
    where = f"partition {partition!r}" if partition else "the cluster"
    if nodes > total_nodes:
        return f"{nodes} nodes requested but {where} has {total_nodes}"
    if cpus_per_node > max_cpus:
        return f"{cpus_per_node} CPUs per node requested but the largest node of {where} has {max_cpus}"
    if gpus_per_node > max_gpus:
        return f"{gpus_per_node} GPUs per node requested but {where} has nodes with at most {max_gpus}"
    return None


def _mpi() -> tuple[str, str]:
    """``(vendor, library version)`` of the MPI this installation runs on (``"unknown"`` if mpi4py
    cannot say)."""
    try:
        lib = mpi_library_version()
    except Exception:  # noqa: BLE001 - a broken mpi4py must not stop rendering; the script says so
        return "unknown", "unknown MPI (mpi4py could not be asked)"
    return vendor_of(lib), lib


def srun_mpi_for(site: Site | None = None) -> tuple[str, str]:
    """``(plugin, why)``: the ``srun --mpi`` plugin for this installation, the site file's
    ``[slurm] srun_mpi`` when it sets one, else the one for the MPI that mpi4py was built against
    (:func:`hpcsuite.runtime.launcher.srun_mpi_plugin`). Local."""
    site = load_site() if site is None else site
    if site.srun_mpi:
        return site.srun_mpi, f"from the site file {site.path}"
    vendor, lib = _mpi()
    return srun_mpi_plugin(vendor), f"for {lib}"


def _python_env() -> tuple[str, str] | None:
    """How the script finds this Python environment: ``("HPCSUITE_VENV", prefix)`` for a venv,
    ``("HPCSUITE_BIN", folder)`` for the folder of this environment's ``hpcsuite`` command
    (conda, ``--prefix``/``--user`` installs), ``None`` when there is no such command."""
    prefix = Path(sys.prefix)
    if sys.prefix != sys.base_prefix and (prefix / "bin" / "activate").is_file():
        return "HPCSUITE_VENV", str(prefix)
    import sysconfig
    folders = [Path(sys.executable).parent, prefix / "bin"]
    try:
        folders.append(Path(sysconfig.get_path("scripts", f"{sysconfig.get_default_scheme()}")))
        folders.append(Path(sysconfig.get_path("scripts", "posix_user")))
    except KeyError:  # pragma: no cover - unusual interpreters
        pass
    for folder in folders:
        if (folder / "hpcsuite").is_file():
            return "HPCSUITE_BIN", str(folder)
    return None


def _dq(value: str) -> str:
    """``value`` in double quotes for bash: ``$VAR`` still expands; quotes, backslashes and
    backticks do not."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def environment_lines(site: Site | None = None) -> list[str]:
    """The lines that make a rendered script self-sufficient, in place of ``source .../lib.sh``:
    the Python environment and MPI it was rendered for, the ``srun --mpi`` plugin, the site file,
    the shared functions of ``lib.sh``, then the site's module loads and environment. Local."""
    site = load_site() if site is None else site
    plugin, why = srun_mpi_for(site)
    vendor, lib = _mpi()
    lines = [f"# ---- rendered by hpcsuite {__version__} (hpcsuite jobscript): everything the job needs, no checkout"]
    env = _python_env()
    if env is None:
        lines.append("# (no venv and no hpcsuite command found when rendering: the job uses the hpcsuite on its PATH)")
    else:
        what = "the venv" if env[0] == "HPCSUITE_VENV" else "the folder of the hpcsuite command"
        lines.append(f"{env[0]}={shlex.quote(env[1])}    # {what} that rendered this script")
    lines.append(f"HPCSUITE_MPI_VENDOR={vendor}    # its MPI: {lib}")
    lines.append(f"HPCSUITE_SRUN_MPI={shlex.quote(plugin)}    # srun --mpi plugin, {why}")
    if site.path is not None:
        lines.append(f"export HPCSUITE_SITE={shlex.quote(str(site.path))}    # the site file read when rendering")
    lib = lib_text().rstrip("\n").splitlines()
    while lib and (lib[0].startswith("#") or not lib[0].strip()):     # its header: what follows says it
        lib.pop(0)
    lines.append("# ---- hpcsuite's shared functions (jobscripts/lib.sh): hpcsuite_modules M..., hpcsuite_env,")
    lines.append("# ---- hpcsuite_step CMD... (srun --mpi=$HPCSUITE_SRUN_MPI; checkpoint and requeue on the time limit)")
    lines.extend(lib)
    lines.append("# ---- end of lib.sh")
    if site.modules:
        lines.append("hpcsuite_modules " + " ".join(shlex.quote(m) for m in site.modules) + "    # the site file's modules")
    for k, v in site.env.items():
        lines.append(f"export {k}={_dq(v)}")
    return lines


def _shipped_deck(path: str) -> str | None:
    """The installed file of a template's default deck ``inputs/NAME.toml``, when it ships."""
    if not path.startswith("inputs/") or "/" in path[len("inputs/"):]:
        return None
    deck = example_decks().get(path[len("inputs/"):].removesuffix(".toml"))
    real = real_path(deck) if deck is not None else None
    return str(real) if real is not None else None


def render(app: str, *, nodes: int | None = None, ntasks_per_node: int | None = None,
           cpus_per_task: int | None = None, time: str | None = None, partition: str | None = None,
           account: str | None = None, qos: str | None = None, gpus_per_node: int | None = None,
           gpu: bool = False, deck: str | None = None, job_name: str | None = None, array: str | None = None,
           check_cluster: bool = True, site: Site | None = None, apps: dict | None = None) -> str:
    """The batch script for ``app`` with the requested resources, ready to submit from anywhere. Local.

    Parameters
    ----------
    partition, account, qos : str, optional
        ``#SBATCH`` directives; default: the site file's ``[slurm]`` values, if any.
    site : Site, optional
        The site configuration (default: :func:`hpcsuite.runtime.site.load_site`).
    apps : dict, optional
        The applications of other packages and their templates (see :func:`templates`).

    Raises
    ------
    InputError
        Unknown app (naming the known ones), no GPU variant, counts that are not positive,
        malformed times, a deck that does not exist, a bad site file, or a request that cannot
        fit the cluster ``sinfo`` reports.
    """
    known = templates(apps)
    if app not in known:
        raise InputError(f"jobscript: unknown application {app!r} (templates exist for: {', '.join(known)})")
    variant = "gpu" if gpu or gpus_per_node else "cpu"
    if variant not in known[app]:
        raise InputError(f"jobscript: {app} has no GPU variant (it runs on CPUs only)")
    template = known[app][variant]
    for name, v in (("nodes", nodes), ("ntasks-per-node", ntasks_per_node),
                    ("cpus-per-task", cpus_per_task), ("gpus-per-node", gpus_per_node)):
        _positive(name, v)
    if time is not None and not valid_time(time):
        raise InputError(f"jobscript: malformed --time {time!r}: use M, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
    if deck is not None and not Path(deck).is_file():
        raise InputError(f"jobscript: deck {deck} does not exist")
    site = load_site() if site is None else site
    partition, account, qos = partition or site.partition, account or site.account, qos or site.qos
    generic = is_generic(template)
    if generic:
        job_name = job_name or app
        if variant == "gpu" and not gpus_per_node:
            gpus_per_node = 1
    text = template.read_text(encoding="utf-8")
    directives = {m.group(1): m.group(2) for m in re.finditer(r"^#SBATCH --([a-z-]+)=(\S+)", text, re.M)}
    n = nodes or int(directives.get("nodes", 1))
    tpn = ntasks_per_node or int(directives.get("ntasks-per-node", 1))
    cpt = cpus_per_task or int(directives.get("cpus-per-task", 1))
    gpn = gpus_per_node or (int(directives["gpus-per-node"]) if "gpus-per-node" in directives else 0)
    if check_cluster:
        why = check_fits(n, tpn * cpt, gpn, partition)
        if why:
            raise InputError(f"jobscript: the request cannot run: {why}")
    for option, value in (("job-name", job_name), ("nodes", nodes), ("ntasks-per-node", ntasks_per_node),
                          ("cpus-per-task", cpus_per_task), ("time", time), ("partition", partition),
                          ("account", account), ("qos", qos), ("gpus-per-node", gpus_per_node),
                          ("array", array)):
        if value is not None:
            text = _set_directive(text, option, value)
    if array is not None:
        text = re.sub(r"^#SBATCH --output=%x-%j\.out$", "#SBATCH --output=%x-%A_%a.out", text, flags=re.M)
    if generic:
        text = text.replace("APPLICATION", app)
    m = re.search(r"^deck=\$\{1:[-?]([^}]*)\}", text, re.M)
    default = str(Path(deck).absolute()) if deck is not None else (_shipped_deck(m.group(1)) if m else None)
    if m and default is not None:
        text = text[:m.start()] + f"deck=${{1:-{default}}}" + text[m.end():]
    if not _SOURCE_LIB.search(text):
        raise InputError(f"jobscript: the template {template} does not source jobscripts/lib.sh "
                         "(a line 'source \"${HPCSUITE_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}/jobscripts/lib.sh\"')")
    env = "\n".join(environment_lines(site))
    text = _SOURCE_LIB.sub(lambda _: env, text, count=1)
    errors = [f for f in lint_text(text, srun_mpi=srun_mpi_for(site)[0]) if f.level == "error"]
    if errors:        # a template or a value that lint rejects is a bug worth stopping for
        raise InputError(f"jobscript: the rendered script has problems: {errors[0].format(app)}")
    return text

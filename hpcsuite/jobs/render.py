"""Rendering batch scripts from the templates in ``jobscripts/`` (``hpcsuite jobscript APP``).

Templates are ordinary sbatch scripts that work as written; rendering only changes the values of
their ``#SBATCH`` directives (enabling the disabled ``##SBATCH --partition``/``--account`` lines when
given), the default deck, and pins ``HPCSUITE_HOME`` to this checkout so the script can be submitted
from anywhere. Every request is validated before anything is written or queued.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..runtime import InputError
from .lint import lint_text, valid_time

__all__ = ["jobscripts_dir", "templates", "render", "check_fits"]


def jobscripts_dir() -> Path:
    """The ``jobscripts/`` folder of this checkout."""
    return Path(__file__).resolve().parents[2] / "jobscripts"


def templates() -> dict[str, dict[str, Path]]:
    """``{app: {"cpu": path, "gpu": path}}`` for every ``jobscripts/APP[-gpu].sbatch``."""
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(jobscripts_dir().glob("*.sbatch")):
        name = p.stem
        variant = "gpu" if name.endswith("-gpu") else "cpu"
        out.setdefault(name.removesuffix("-gpu"), {})[variant] = p
    return out


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


def render(app: str, *, nodes: int | None = None, ntasks_per_node: int | None = None,
           cpus_per_task: int | None = None, time: str | None = None, partition: str | None = None,
           account: str | None = None, gpus_per_node: int | None = None, gpu: bool = False,
           deck: str | None = None, job_name: str | None = None, array: str | None = None,
           check_cluster: bool = True, home: str | Path | None = None) -> str:
    """The batch script for ``app`` with the requested resources. Local.

    Raises
    ------
    InputError
        Unknown app (naming the known ones), no GPU variant, counts that are not positive,
        malformed times, a deck that does not exist, or a request that cannot fit the cluster
        ``sinfo`` reports.
    """
    known = templates()
    if app not in known:
        raise InputError(f"jobscript: unknown application {app!r} (templates exist for: {', '.join(known)})")
    variant = "gpu" if gpu or gpus_per_node else "cpu"
    if variant not in known[app]:
        raise InputError(f"jobscript: {app} has no GPU variant (it runs on CPUs only)")
    for name, v in (("nodes", nodes), ("ntasks-per-node", ntasks_per_node),
                    ("cpus-per-task", cpus_per_task), ("gpus-per-node", gpus_per_node)):
        _positive(name, v)
    if time is not None and not valid_time(time):
        raise InputError(f"jobscript: malformed --time {time!r}: use M, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
    if deck is not None and not Path(deck).is_file():
        raise InputError(f"jobscript: deck {deck} does not exist")
    text = known[app][variant].read_text()
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
                          ("account", account), ("gpus-per-node", gpus_per_node), ("array", array)):
        if value is not None:
            text = _set_directive(text, option, value)
    if array is not None:
        text = re.sub(r"^#SBATCH --output=%x-%j\.out$", "#SBATCH --output=%x-%A_%a.out", text, flags=re.M)
    if deck is not None:
        text = re.sub(r"^deck=\$\{1:-[^}]*\}", f"deck=${{1:-{deck}}}", text, count=1, flags=re.M)
    home = Path(home) if home else jobscripts_dir().parent
    text = text.replace('source "${HPCSUITE_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}/jobscripts/lib.sh"',
                        f'export HPCSUITE_HOME="${{HPCSUITE_HOME:-{home}}}"\nsource "$HPCSUITE_HOME/jobscripts/lib.sh"')
    errors = [f for f in lint_text(text) if f.level == "error"]
    if errors:        # a template or a value that lint rejects is a bug worth stopping for
        raise InputError(f"jobscript: the rendered script has problems: {errors[0].format(app)}")
    return text

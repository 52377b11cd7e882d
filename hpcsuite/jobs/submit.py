"""Submitting batch scripts: ``sbatch --parsable`` with dependencies (``hpcsuite submit``)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from ..runtime import InputError
from .lint import lint_file

__all__ = ["submit", "SubmitError"]


class SubmitError(RuntimeError):
    """sbatch refused the job (the message carries sbatch's own words)."""


def submit(script: str | Path, args: Sequence[str] = (), *, after_ok: Sequence[str] = (),
           after_any: Sequence[str] = (), wait: bool = False, extra: Sequence[str] = (),
           timeout: float | None = None) -> tuple[str, int | None]:
    """Queue ``script`` with ``sbatch --parsable``; return ``(job_id, exit_code_if_waited)``. Local.

    The script is linted first: errors stop the submission before anything is queued.
    ``after_ok``/``after_any`` add ``--dependency=afterok:ID[:ID]`` / ``afterany:...``; ``wait`` uses
    ``sbatch --wait`` and returns the job's exit code.

    Raises
    ------
    InputError
        The script is missing or has lint errors, a dependency id is malformed, or sbatch is not
        installed.
    SubmitError
        sbatch rejected the job.
    """
    script = Path(script)
    if not script.is_file():
        raise InputError(f"submit: {script} does not exist")
    errors = [f for f in lint_file(script) if f.level == "error"]
    if errors:
        raise InputError(f"submit: not queued: {errors[0].format(str(script))}")
    for jid in list(after_ok) + list(after_any):
        if not str(jid).replace("_", "").isdigit():
            raise InputError(f"submit: malformed job id {jid!r} in a dependency")
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise InputError("submit: sbatch not found: run this on a SLURM login node (or install slurm-wlm)")
    cmd = [sbatch, "--parsable"]
    deps = []
    if after_ok:
        deps.append("afterok:" + ":".join(map(str, after_ok)))
    if after_any:
        deps.append("afterany:" + ":".join(map(str, after_any)))
    if deps:
        cmd.append("--dependency=" + ",".join(deps))
    if wait:
        cmd.append("--wait")
    cmd += list(extra) + [str(script)] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = p.stdout.strip().splitlines()
    job = out[0].split(";")[0] if out and out[0].split(";")[0].isdigit() else None
    if job is None:
        raise SubmitError(f"sbatch rejected {script}: {p.stderr.strip() or p.stdout.strip()}")
    return job, (p.returncode if wait else None)

"""Checking a SLURM batch script without a cluster (``hpcsuite jobscript --check FILE``).

Finds the mistakes that make jobs fail late or silently: ``#SBATCH`` lines after the first command
(sbatch ignores them), unknown or misspelt options (with a suggestion), malformed time limits and
signal specs, no task count, near-miss directives (``# SBATCH``, ``#sbatch``) that sbatch treats as
comments, a missing interpreter line, and ``srun`` steps whose ``--mpi=`` plugin does not fit the
MPI (a wrong or missing plugin silently starts every rank as its own size-1 job, or none at all).

The plugin that fits is, in order: the site file's ``[slurm] srun_mpi``; the one for the MPI the
script says it was rendered for (``HPCSUITE_MPI_VENDOR=...``, written by ``hpcsuite jobscript``);
the one for the MPI of this installation (:func:`hpcsuite.runtime.launcher.srun_mpi_plugin`: pmix
for Open MPI, pmi2 for MPICH and its derivatives). ``--mpi=$VAR`` is resolved through plain
``VAR=value`` assignments of the script.
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass

__all__ = ["Finding", "lint_text", "lint_file", "parse_directives", "valid_time", "expected_srun_mpi",
           "plugin_fits", "SBATCH_LONG", "SBATCH_SHORT"]

# sbatch 22.05 options (from `sbatch --help`); value=True when the option takes an argument
SBATCH_LONG = {
    "array": True, "account": True, "bb": True, "bbf": True, "begin": True, "comment": True,
    "cpu-freq": True, "cpus-per-task": True, "dependency": True, "deadline": True,
    "delay-boot": True, "chdir": True, "error": True, "export": True, "export-file": True,
    "get-user-env": False, "gid": True, "gres": True, "gres-flags": True, "hold": False,
    "ignore-pbs": False, "input": True, "job-name": True, "no-kill": False, "licenses": True,
    "clusters": True, "container": True, "distribution": True, "mail-type": True,
    "mail-user": True, "mcs-label": True, "ntasks": True, "nice": False, "no-requeue": False,
    "ntasks-per-node": True, "nodes": True, "output": True, "overcommit": False,
    "partition": True, "parsable": False, "power": True, "priority": True, "profile": True,
    "propagate": False, "qos": True, "quiet": False, "reboot": False, "requeue": False,
    "oversubscribe": False, "core-spec": True, "signal": True, "spread-job": False,
    "switches": True, "thread-spec": True, "time": True, "time-min": True, "uid": True,
    "use-min-nodes": False, "verbose": False, "wait": False, "wckey": True, "wrap": True,
    "cluster-constraint": True, "contiguous": False, "constraint": True, "nodefile": True,
    "mem": True, "mincpus": True, "reservation": True, "tmp": True, "nodelist": True,
    "exclude": True, "exclusive": False, "mem-per-cpu": True, "sockets-per-node": True,
    "cores-per-socket": True, "threads-per-core": True, "ntasks-per-core": True,
    "ntasks-per-socket": True, "cpus-per-gpu": True, "gpus": True, "gpu-bind": True,
    "gpu-freq": True, "gpus-per-node": True, "gpus-per-socket": True, "gpus-per-task": True,
    "mem-per-gpu": True, "hint": True, "mem-bind": True, "cpu-bind": True, "kill-on-invalid-dep": True,
    "open-mode": True, "test-only": False, "tres-per-task": True,
}
SBATCH_SHORT = {"a": "array", "A": "account", "b": "begin", "c": "cpus-per-task", "d": "dependency",
                "D": "chdir", "e": "error", "H": "hold", "i": "input", "J": "job-name",
                "k": "no-kill", "L": "licenses", "M": "clusters", "m": "distribution", "n": "ntasks",
                "N": "nodes", "o": "output", "O": "overcommit", "p": "partition", "q": "qos",
                "Q": "quiet", "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose",
                "W": "wait", "C": "constraint", "F": "nodefile", "w": "nodelist", "x": "exclude",
                "G": "gpus"}

_TIME = re.compile(r"^(?:(\d+)-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?|(\d+)(?::(\d{1,2})(?::(\d{1,2}))?)?)$")
_SIGNAL = re.compile(r"^(?:[RB]{1,2}:)?(?:SIG)?[A-Z0-9]+(?:@\d+)?$")


@dataclass(frozen=True)
class Finding:
    """One problem: 1-based line number, ``"error"`` or ``"warning"``, and what to do."""

    line: int
    level: str
    message: str

    def format(self, path: str) -> str:
        return f"{path}:{self.line}: {self.level}: {self.message}"


def valid_time(value: str) -> bool:
    """Whether ``value`` is a SLURM time limit: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``,
    ``D-H:M:S``, ``UNLIMITED`` or ``INFINITE``."""
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return True
    m = _TIME.match(value)
    if not m:
        return False
    if m.group(1) is not None:                       # days-hours[:minutes[:seconds]]
        return int(m.group(2)) < 24 and all(g is None or int(g) < 60 for g in m.group(3, 4))
    parts = [g for g in m.group(5, 6, 7) if g is not None]
    return all(int(p) < 60 for p in parts[1:])       # leading field may exceed 59


def parse_directives(text: str):
    """``[(line, option_name, value_or_None, raw)]`` of the ``#SBATCH`` lines before the first
    command, and the line number of the first command (or ``None``)."""
    out, first_cmd = [], None
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if line.startswith("#SBATCH"):
            if first_cmd is None:
                out.append((no, *_split_option(line[len("#SBATCH"):]), line))
            continue
        if first_cmd is None and s and not s.startswith("#"):
            first_cmd = no
    return out, first_cmd


def _split_option(rest: str):
    body = rest.split(" #", 1)[0].strip()
    try:
        tok = shlex.split(body)
    except ValueError:
        tok = body.split()
    if not tok:
        return None, None
    opt = tok[0]
    if opt.startswith("--"):
        name, _, val = opt[2:].partition("=")
        return name, (val if "=" in opt else (tok[1] if len(tok) > 1 else None))
    if opt.startswith("-") and len(opt) >= 2:
        short = opt[1]
        val = opt[2:].lstrip("=") or (tok[1] if len(tok) > 1 else None)
        return "-" + short, val
    return opt, None


def lint_text(text: str, *, srun_mpi: str | None = None) -> list[Finding]:
    """All findings for a batch script's text, in line order. Local.

    ``srun_mpi`` is the ``srun --mpi`` plugin that fits; default: :func:`expected_srun_mpi`.
    """
    f: list[Finding] = []
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#!"):
        f.append(Finding(1, "error", "the first line must be an interpreter line such as '#!/bin/bash' "
                                     "(sbatch refuses the script otherwise)"))
    directives, first_cmd = parse_directives(text)
    seen: dict[str, int] = {}
    for no, line in enumerate(lines, 1):
        if first_cmd is not None and no > first_cmd and line.startswith("#SBATCH"):
            f.append(Finding(no, "error", f"#SBATCH after the first command (line {first_cmd}) is ignored "
                                          "by sbatch; move it above"))
        elif re.match(r"^\s*#\s*sbatch\s+--?[A-Za-z]", line, re.I) and not line.startswith("#SBATCH") \
                and not line.startswith("##"):
            f.append(Finding(no, "warning", "looks like a directive but sbatch only reads lines starting "
                                            "exactly with '#SBATCH' (disable one on purpose with '##SBATCH')"))
    for no, name, val, raw in directives:
        if name is None:
            f.append(Finding(no, "error", "empty #SBATCH directive"))
            continue
        if name.startswith("-") and len(name) == 2:
            long = SBATCH_SHORT.get(name[1])
            if long is None:
                f.append(Finding(no, "error", f"unknown sbatch option '{name}'"))
                continue
            name = long
        elif not raw[len("#SBATCH"):].strip().startswith("--"):
            f.append(Finding(no, "error", f"malformed directive {raw.strip()!r}: options start with '--' or '-'"))
            continue
        if name not in SBATCH_LONG:
            close = difflib.get_close_matches(name, list(SBATCH_LONG), n=1)
            hint = f"; did you mean '--{close[0]}'?" if close else ""
            f.append(Finding(no, "error", f"unknown sbatch option '--{name}'{hint}"))
            continue
        if SBATCH_LONG[name] and not val:
            f.append(Finding(no, "error", f"'--{name}' needs a value"))
            continue
        if name in ("time", "time-min") and not valid_time(val):
            f.append(Finding(no, "error", f"malformed time limit '{val}' for --{name}: use M, M:S, H:M:S, "
                                          "D-H, D-H:M or D-H:M:S (e.g. 01:30:00 or 2-00:00:00)"))
        if name == "signal" and not _SIGNAL.match(val):
            f.append(Finding(no, "error", f"malformed --signal '{val}': use [B:]SIG[@seconds], e.g. B:USR1@120"))
        if name in ("nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gpus-per-node") and val and \
                not re.fullmatch(r"\d+(-\d+)?|[a-z0-9_]+:\d+", val):
            f.append(Finding(no, "error", f"'--{name}' needs a positive count, got '{val}'"))
        if name in seen:
            f.append(Finding(no, "warning", f"'--{name}' is given again (line {seen[name]}); the last one wins"))
        seen[name] = no
    if directives and not ({"ntasks", "ntasks-per-node"} & set(seen)) and "wrap" not in seen:
        f.append(Finding(directives[0][0], "warning", "no task count: add --ntasks or --ntasks-per-node "
                                                      "(otherwise srun starts one task per node)"))
    f.extend(_srun_findings(text, lines, srun_mpi))
    return sorted(f, key=lambda x: x.line)


_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s;#]*)")
_MPI_OPT = re.compile(r"--mpi(?:=|\s+)(\S+)")


def _assignments(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        m = _ASSIGN.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip("'\"")
    return out


def _resolve(value: str, assigned: dict[str, str], depth: int = 0) -> str | None:
    """``value`` with ``$NAME``, ``${NAME}`` and ``${NAME:-default}`` replaced from the script's
    plain assignments; ``None`` when something stays unknown."""
    value = value.strip("'\"")
    m = re.fullmatch(r"\$(?:\{([A-Za-z_]\w*)(?::?-([^}]*))?\}|([A-Za-z_]\w*))", value)
    if m is None:
        return None if "$" in value or "`" in value else value
    name, default = m.group(1) or m.group(3), m.group(2)
    if depth < 5 and name in assigned:
        got = _resolve(assigned[name], {k: v for k, v in assigned.items() if k != name}, depth + 1)
        if got is not None:
            return got
    return _resolve(default, assigned, depth + 1) if default is not None else None


def plugin_fits(plugin: str, expected: str) -> bool:
    """Whether ``srun --mpi=plugin`` starts what ``expected`` starts (``pmix_v4`` fits ``pmix``). Local."""
    base = lambda p: p.split("_v")[0] if p.startswith("pmix") else p   # noqa: E731
    return plugin == expected or base(plugin) == base(expected)


def expected_srun_mpi(text: str = "") -> tuple[str | None, str]:
    """``(plugin, where that comes from)`` for a script's ``srun --mpi=``: the site file's, else
    the one for the MPI the script was rendered for, else this installation's; ``(None, why)``
    when none is known. Local (reads the site file; asks mpi4py for the MPI library)."""
    from ..runtime.launcher import VENDORS, mpi_library_version, srun_mpi_plugin, vendor_of
    from ..runtime.site import load_site
    try:
        site = load_site()
    except ValueError:                  # a broken site file is reported where it is used
        site = None
    if site is not None and site.srun_mpi:
        return site.srun_mpi, f"the site file {site.path} sets srun_mpi = {site.srun_mpi!r}"
    vendor = _assignments(text.splitlines()).get("HPCSUITE_MPI_VENDOR")
    if vendor in VENDORS:
        return srun_mpi_plugin(vendor), f"the script was rendered for {vendor}"
    try:
        lib = mpi_library_version()
    except Exception:  # noqa: BLE001 - no usable mpi4py: nothing to compare with
        return None, "this installation's MPI is unknown"
    if vendor_of(lib) == "unknown":
        return None, f"this installation's MPI ({lib}) is not one hpcsuite knows"
    return srun_mpi_plugin(vendor_of(lib)), f"this installation's MPI is {lib}"


def _srun_findings(text: str, lines, srun_mpi) -> list[Finding]:
    steps = [(no, line.strip()) for no, line in enumerate(lines, 1)
             if re.match(r"^(exec\s+)?srun\b", line.strip()) and "--overlap" not in line]
    if not steps:
        return []
    if srun_mpi is None:
        expected, why = expected_srun_mpi(text)
    else:
        expected, why = srun_mpi, f"--mpi={srun_mpi} was asked for"
    assigned = _assignments(lines)
    out = []
    for no, s in steps:
        m = _MPI_OPT.search(s)
        if m is None:
            use = f"--mpi={expected} ({why})" if expected else "the plugin of your MPI (pmi2: MPICH, pmix: Open MPI)"
            out.append(Finding(no, "warning", f"srun without --mpi=...: use {use}, otherwise every rank may "
                                              "start as its own size-1 job"))
            continue
        plugin = _resolve(m.group(1), assigned)
        if plugin is None or plugin == "list" or expected is None:
            continue
        if not plugin_fits(plugin, expected):
            out.append(Finding(no, "error", f"srun --mpi={plugin} does not fit: {why}; use --mpi={expected}"))
    return out


def lint_file(path, *, srun_mpi: str | None = None) -> list[Finding]:
    """Findings for the script at ``path`` (``OSError`` if it cannot be read); see
    :func:`lint_text`. Local."""
    with open(path, encoding="utf-8") as fh:
        return lint_text(fh.read(), srun_mpi=srun_mpi)

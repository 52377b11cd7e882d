"""Daemon processes identified by PID *and* start time, so a recycled PID is never signalled.

Daemons run in the foreground of their own session (``start_new_session``): they outlive the
``hpcsuite stage up`` that started them, and are stopped by PID by ``stage down`` or the epilog.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Proc", "start", "alive", "stop_all", "tail"]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid`` from /proc, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rindex(")") + 2:].split()      # after "pid (comm) "
    return rest[0], int(rest[19])


@dataclass
class Proc:
    """A started daemon: what it is, where it logs, and how to recognise its PID."""

    name: str            # e.g. "mon.a", "osd.0", "ceph-fuse"
    pid: int
    start: int           # start time (clock ticks since boot) from /proc/<pid>/stat
    log: str
    host: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def start(name: str, argv: list[str], log: str | os.PathLike, host: str = "", env=None) -> tuple[Proc, subprocess.Popen]:
    """Start ``argv`` in its own session, stdout/stderr appended to ``log``. Local."""
    with open(log, "ab") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, env=env, close_fds=True)
    st = _stat(p.pid)
    return Proc(name, p.pid, st[1] if st else 0, str(log), host), p


def alive(proc: Proc) -> bool:
    """Whether ``proc`` still runs (a zombie counts as gone; a recycled PID as well). Local."""
    st = _stat(proc.pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    return proc.start == 0 or st[1] == proc.start


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)       # our own child: collect it so it is not a zombie
    except ChildProcessError:
        pass


def _signal(procs: list[Proc], sig: int) -> list[Proc]:
    for p in procs:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
    return procs


def _await_exit(live: list[Proc], seconds: float) -> list[Proc]:
    """Reap and poll ``live`` until none is alive or ``seconds`` passed; returns those still alive."""
    deadline = time.monotonic() + seconds
    while live and time.monotonic() < deadline:
        for p in live:
            _reap(p.pid)
        live = [p for p in live if alive(p)]
        if live:
            time.sleep(0.05)
    return live


def stop_all(procs: list[Proc], sig: int = signal.SIGTERM, grace: float = 5.0) -> list[Proc]:
    """Send ``sig`` to every live proc, wait up to ``grace`` s, then SIGKILL the rest. Local.

    Returns the procs that were still alive after SIGKILL and a further second (normally none)."""
    live = _await_exit(_signal([p for p in procs if alive(p)], sig), grace)
    live = _await_exit(_signal(live, signal.SIGKILL), 2.0)
    for p in procs:
        _reap(p.pid)                      # collect our own children that died meanwhile
    return live


def tail(path: str | os.PathLike, lines: int = 3, width: int = 300) -> str:
    """The last ``lines`` non-empty lines of a log file, joined with ' | ' (for one-line errors)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    got = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(ln[:width] for ln in got)

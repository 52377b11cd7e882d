"""Daemon processes identified by PID *and* start time, so a recycled PID is never signalled.

Daemons run in the foreground of their own session (``start_new_session``): they outlive the
``hpcsuite stage up`` that started them, and are stopped by PID by ``stage down`` or the epilog.

The records (:class:`Proc`, kept in ``state.json`` and ``<node folder>/pids/*.json``) hold the start
time as ``/proc/<pid>/stat`` gives it, in clock ticks since boot: ``jobscripts/stage-epilog.sh``
(plain bash) compares that field, and records written by earlier versions read the same. The
processes themselves are looked at and signalled through psutil (whose ``send_signal`` also refuses
a PID taken by another process since it was looked at).

Waiting for them to exit polls (:func:`hpcsuite.staging.poll.wait_for`) rather than using
``psutil.wait_procs``: a daemon whose starter has exited is the child of PID 1, and where PID 1
does not collect its children (in many containers) an exited daemon stays a zombie, which
``wait_procs`` counts as running until its timeout; here, as in the epilog, a zombie has exited.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass

import psutil

from .poll import wait_for

__all__ = ["Proc", "start", "start_ticks", "alive", "stop_all", "tail"]

#: clock ticks per second of ``/proc/<pid>/stat``'s start time (what psutil divides by as well)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _ticks(p: psutil.Process) -> int:
    """Start time of ``p`` in clock ticks since boot, as ``/proc/<pid>/stat`` (field 22) has it.

    psutil gives it as ticks / CLOCK_TICKS + the boot time (whole seconds of ``/proc/stat``'s
    btime): subtracting the boot time and rounding gives the ticks back exactly.
    """
    return round((p.create_time() - psutil.boot_time()) * CLOCK_TICKS)


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (what :class:`Proc` records), or None when
    there is no such process. Local."""
    try:
        return _ticks(psutil.Process(pid))
    except psutil.Error:
        return None


@dataclass
class Proc:
    """A started daemon: what it is, where it logs, and how to recognise its PID."""

    name: str            # e.g. "mon.a", "osd.0", "ceph-fuse"
    pid: int
    start: int           # start time in clock ticks since boot (/proc/<pid>/stat); 0 = unknown
    log: str
    host: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def start(name: str, argv: list[str], log: str | os.PathLike, host: str = "", env=None) -> tuple[Proc, subprocess.Popen]:
    """Start ``argv`` in its own session, stdout/stderr appended to ``log``. Local."""
    with open(log, "ab") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, env=env, close_fds=True)
    return Proc(name, p.pid, start_ticks(p.pid) or 0, str(log), host), p


def _running(p: psutil.Process) -> bool:
    """Whether ``p`` has not exited (a zombie has: its parent just has not collected it yet)."""
    try:
        return p.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def _process(proc: Proc) -> psutil.Process | None:
    """The running process ``proc`` records, or None: gone, a zombie, or its PID now another's."""
    try:
        p = psutil.Process(proc.pid)
        if proc.start and _ticks(p) != proc.start:
            return None
    except psutil.Error:
        return None
    return p if _running(p) else None


def alive(proc: Proc) -> bool:
    """Whether ``proc`` still runs (a zombie counts as gone; a recycled PID as well). Local."""
    return _process(proc) is not None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)       # our own child: collect it so it is not a zombie
    except ChildProcessError:
        pass


def _signal_and_wait(live: list[psutil.Process], sig: int, seconds: float) -> list[psutil.Process]:
    """Send ``sig`` to ``live``, wait up to ``seconds`` for them to exit (collecting our own
    children); return those still running."""
    for p in live:
        try:
            p.send_signal(sig)            # psutil refuses a PID that another process took meanwhile
        except psutil.Error:
            pass

    def none_left(_left: float):
        nonlocal live
        for p in live:
            _reap(p.pid)
        live = [p for p in live if _running(p)]
        return True if not live else None
    wait_for(none_left, time.monotonic() + seconds, interval=0.05)
    return live


def stop_all(procs: list[Proc], sig: int = signal.SIGTERM, grace: float = 5.0) -> list[Proc]:
    """Send ``sig`` to every live proc, wait up to ``grace`` s, then SIGKILL the rest. Local.

    Returns the procs that were still alive after SIGKILL and a further two seconds (normally none)."""
    live = [p for p in map(_process, procs) if p is not None]
    live = _signal_and_wait(live, sig, grace)
    live = _signal_and_wait(live, signal.SIGKILL, 2.0)
    for p in procs:
        _reap(p.pid)                      # collect our own children that died meanwhile
    left = {p.pid for p in live}
    return [p for p in procs if p.pid in left]


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

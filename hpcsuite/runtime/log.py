"""Rank-0 logging and progress reporting.

Only rank 0 of a team prints informational messages, so a 1,000-rank job's log reads like a serial
one. Warnings and errors can be printed from any rank (``all_ranks=True``) and then carry the rank.

Progress of long loops: a ``tqdm`` bar when stderr is a terminal, and plain periodic lines (every
``interval`` seconds, default 30 or ``$HPCSUITE_PROGRESS_INTERVAL``) when it is not, as in a SLURM
batch log, where a redrawn bar would be unreadable. ``quiet=True`` silences both.
"""
from __future__ import annotations

import os
import sys
import time

__all__ = ["Logger", "Progress"]


def _fmt_seconds(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Logger:
    """Messages from rank 0 of ``team`` (all ranks for ``all_ranks=True``). Local: call it on
    every rank, only rank 0 prints.

    Parameters
    ----------
    name : str
        Prefix of every line (the application's name).
    team : Team, optional
        Whose rank 0 prints; the world when omitted.
    quiet : bool
        Suppress :meth:`info` (warnings and errors still print).
    stream : file, optional
        Where to write (default ``sys.stdout`` for info, ``sys.stderr`` for warnings).
    """

    def __init__(self, name: str, team=None, quiet: bool = False, stream=None):
        if team is None:
            from .team import Team
            team = Team.world()
        self.name, self.team, self.quiet, self.stream = name, team, quiet, stream
        self.t0 = time.perf_counter()

    def _write(self, msg: str, stream, all_ranks: bool) -> None:
        if not all_ranks and self.team.rank != 0:
            return
        who = f"[rank {self.team.rank}] " if all_ranks and self.team.size > 1 else ""
        stream = self.stream or stream
        stream.write(f"{self.name}: {who}{msg}\n")
        stream.flush()

    def info(self, msg: str) -> None:
        """Print ``msg`` on rank 0 unless quiet. Local (no communication)."""
        if not self.quiet:
            self._write(msg, sys.stdout, False)

    def result(self, msg: str) -> None:
        """Print a final result on rank 0, even when quiet. Local."""
        self._write(msg, sys.stdout, False)

    def warning(self, msg: str, all_ranks: bool = False) -> None:
        """Print a warning (on rank 0, or on every calling rank). Local."""
        self._write(f"warning: {msg}", sys.stderr, all_ranks)

    def progress(self, total: int, desc: str = "", unit: str = "step", interval: float | None = None):
        """A :class:`Progress` for ``total`` steps that prints through this logger's settings."""
        return Progress(total, desc=desc or self.name, unit=unit, team=self.team, quiet=self.quiet,
                        interval=interval)


class Progress:
    """Progress of a loop of ``total`` steps, shown on rank 0. Local (no communication).

    Use as a context manager; call :meth:`update` once per step (cheap: a counter and a clock read
    between prints). ``postfix`` values given to ``update`` (such as the simulated time) appear in the
    line.

    Examples
    --------
    >>> with Progress(100, desc="heat3d", quiet=True) as p:   # doctest: +SKIP
    ...     for step in range(100):
    ...         p.update(1, t=step * 0.1)
    """

    def __init__(self, total: int, desc: str = "", unit: str = "step", team=None,
                 quiet: bool = False, interval: float | None = None, stream=None):
        rank = 0 if team is None else team.rank
        self.total, self.desc, self.unit = int(total), desc, unit
        self.stream = stream or sys.stderr
        self.enabled = rank == 0 and not quiet
        if interval is None:
            interval = float(os.environ.get("HPCSUITE_PROGRESS_INTERVAL", "30"))
        self.interval = interval
        self.n = 0
        self.t0 = self.last = time.perf_counter()
        self._bar = None
        if self.enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm
            self._bar = tqdm(total=self.total, desc=desc, unit=unit, file=self.stream,
                             dynamic_ncols=True, leave=True)

    def update(self, n: int = 1, **postfix) -> None:
        """Advance by ``n`` steps. Local."""
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix({k: _short(v) for k, v in postfix.items()}, refresh=False)
            self._bar.update(n)
            return
        now = time.perf_counter()
        if now - self.last >= self.interval or self.n == self.total:
            self.last = now
            self._line(now, postfix)

    def _line(self, now: float, postfix: dict) -> None:
        elapsed = now - self.t0
        pct = 100.0 * self.n / self.total if self.total else 100.0
        eta = elapsed * (self.total - self.n) / self.n if self.n else float("nan")
        extra = "".join(f" {k}={_short(v)}" for k, v in postfix.items())
        self.stream.write(f"{self.desc}: {self.unit} {self.n}/{self.total} ({pct:.0f}%){extra}, "
                          f"elapsed {_fmt_seconds(elapsed)}, eta {_fmt_seconds(eta) if self.n else '?'}\n")
        self.stream.flush()

    def close(self) -> None:
        """Finish the bar (or print nothing more for plain lines). Local."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)

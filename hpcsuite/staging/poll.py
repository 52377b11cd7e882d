"""Waiting for something outside the process: try, sleep, try again until a deadline.

Deploying a cluster waits for many things that only tell by being asked (a monitor that answers, a
healthy status, a gateway that serves HTTP, a mount, daemons that have exited). Each of those waits
is one call here with its own attempt, deadline and interval, so the loop (try; stop on a result;
give up at the deadline after one last try; sleep) is written once.

Deadlines are ``time.monotonic()`` values (not changed by clock adjustments).
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from .store import StagingError

__all__ = ["wait_for", "poll_until"]

T = TypeVar("T")


def wait_for(attempt: Callable[[float], T | None], deadline: float, interval: float) -> T | None:
    """Call ``attempt(left)`` until it returns something other than None; return that, or None
    once the deadline has passed. Local.

    Parameters
    ----------
    attempt : callable
        Called with the seconds left until the deadline (0 once it has passed); returns None for
        "not yet". An exception it raises ends the wait (e.g. a daemon found dead).
    deadline : float
        A ``time.monotonic()`` time. ``attempt`` runs at least once, and once more at the deadline
        after earlier tries failed.
    interval : float
        Seconds between attempts (the last sleep is cut short at the deadline).
    """
    if not interval > 0:
        raise ValueError(f"wait_for: interval must be > 0 seconds, got {interval!r}")
    while True:
        result = attempt(max(deadline - time.monotonic(), 0.0))
        if result is not None:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(interval, left))


def poll_until(what: str | Callable[[], str], deadline: float, attempt: Callable[[float], T | None],
               interval: float) -> T:
    """:func:`wait_for` that raises when the deadline passes. Local.

    Parameters
    ----------
    what : str or callable
        The error message at the deadline, or a function that makes it then (so it can name the
        last state seen and the tail of a log file).
    deadline, attempt, interval
        As for :func:`wait_for`.

    Raises
    ------
    StagingError
        ``what`` (its message) when no attempt succeeded by the deadline.
    """
    result = wait_for(attempt, deadline, interval)
    if result is None:
        raise StagingError(what() if callable(what) else what)
    return result

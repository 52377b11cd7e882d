"""Errors that end a parallel program cleanly instead of leaving ranks waiting forever.

Two kinds of failure, two paths:

* **Bad input** (:class:`InputError`): detected while validating, before any computation. Validation
  runs on every rank and :func:`agree` makes the outcome collective, so every rank raises the same
  error; rank 0 prints it once and every rank exits with code 2.
* **A failure while running** (any other exception, possibly on one rank only, while the others wait
  in a collective): the failing rank prints its message and traceback and calls
  ``MPI_Abort``, which ends every rank of the job with a non-zero code within seconds.

:func:`guarded` applies both; ``hpcsuite run`` and the apps run under it.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Callable

__all__ = ["HpcsuiteError", "InputError", "agree", "raise_message", "guarded", "install_abort_hook",
           "EXIT_OK", "EXIT_FAILURE", "EXIT_INPUT"]

EXIT_OK, EXIT_FAILURE, EXIT_INPUT = 0, 1, 2


class HpcsuiteError(Exception):
    """Base class of the errors hpcsuite raises on purpose."""


class InputError(HpcsuiteError, ValueError):
    """Bad input: a deck, an argument, a file or a resource request that cannot work.

    The message is one line that names what is wrong (and where: ``deck.toml: [grid] nx ...``).
    """


def agree(team, fn: Callable, *args, **kwargs):
    """Run ``fn`` on every rank and make its failure collective. Collective.

    If ``fn`` raises on any rank, every rank raises: an :class:`InputError` carrying the message of
    the lowest failing rank (its own exception where that rank raised an ``InputError`` itself).
    Use it around validation so that ranks never disagree about whether input is good.
    """
    try:
        result, err = fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - any failure is reported collectively
        result, err = None, exc
    msg = None if err is None else (str(err) if isinstance(err, InputError)
                                    else f"{type(err).__name__}: {err}")
    msgs = [msg] if team is None or team.size == 1 else team.comm.allgather(msg)
    first = next((m for m in msgs if m is not None), None)
    if first is None:
        return result
    if err is not None and str(err) == first and isinstance(err, InputError):
        raise err
    raise InputError(first)


def raise_message(msg: str | None) -> None:
    """Raise ``InputError(msg)`` when ``msg`` is a non-empty message; nothing otherwise. Local.

    For validation that collects one message per rank (None where the rank's input is good):
    ``agree(team, raise_message, msg)`` raises the lowest failing rank's message on every rank.
    """
    if msg:
        raise InputError(msg)


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def report_and_abort(exc: BaseException, code: int = EXIT_FAILURE) -> None:
    """Print ``exc`` with its rank and traceback to stderr, then end the whole job. Never returns.

    On a single rank this exits with ``code``; on several it calls ``MPI_Abort(code)``. Ranks other
    than 0 wait half a second before printing, so when every rank fails alike the job ends with rank
    0's report only.
    """
    comm = _world()
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank != 0 and size > 1:
        time.sleep(0.5)
    where = f"rank {rank} of {size}" if size > 1 else "error"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sys.stderr.write(f"{tb}hpcsuite: {where}: {type(exc).__name__}: {exc}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    if size > 1:
        # Give the launcher (Hydra, srun) a moment to forward this rank's output: MPI_Abort tears
        # the job down at once and output still in the pipe to the launcher would be lost.
        time.sleep(0.3)
        comm.Abort(code)
    os._exit(code)


def guarded(main: Callable[[], int | None], team=None) -> int:
    """Run ``main()`` so that any failure ends every rank; return the exit code. Collective.

    * :class:`InputError` is taken to be raised on every rank (validate under :func:`agree`):
      rank 0 prints ``hpcsuite: error: <message>`` once and every rank returns 2.
    * Any other exception (on any subset of ranks) prints the failing rank's traceback and aborts
      the job (:func:`report_and_abort`), exit code 1.
    * ``KeyboardInterrupt`` aborts with code 130.
    """
    rank = _world().Get_rank() if team is None else team.rank
    try:
        rc = main()
        return EXIT_OK if rc is None else int(rc)
    except InputError as exc:
        if rank == 0:
            sys.stderr.write(f"hpcsuite: error: {exc}\n")
            sys.stderr.flush()
        return EXIT_INPUT
    except KeyboardInterrupt as exc:
        report_and_abort(exc, 130)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001
        report_and_abort(exc, EXIT_FAILURE)
    return EXIT_FAILURE  # not reached


def install_abort_hook() -> None:
    """Make an uncaught exception in a user program abort the whole MPI job. Local.

    For scripts that import hpcsuite directly (not through ``hpcsuite run``): without it, one rank's
    exception leaves the others blocked in their next collective until the job's time limit.
    """
    def hook(exc_type, exc, tb):
        if exc is None:
            exc = exc_type()
        exc.__traceback__ = tb
        report_and_abort(exc, EXIT_FAILURE)

    sys.excepthook = hook

"""Checkpoint on request: the time-limit warning of a batch job becomes a clean stop and restart.

The job templates ask SLURM for ``--signal=B:USR1@120``; the batch shell forwards SIGUSR1 to every
task of the step. :class:`CheckpointRequest` turns the signal into a flag that the application polls
between steps; :meth:`CheckpointRequest.due` makes the decision collective (any rank signalled ->
every rank checkpoints at the same step), the application writes its state, and exits with
:data:`EXIT_CHECKPOINTED` (85). The job script sees 85 and requeues the job; the next run finds the
checkpoint and continues from it.

Examples
--------
::

    req = CheckpointRequest(team)          # installs the SIGUSR1 handler
    for step in range(start, steps):
        advance()
        if req.due(step):                   # collective: same answer on every rank
            save_state(step + 1)
            return EXIT_CHECKPOINTED
"""
from __future__ import annotations

import os
import signal

__all__ = ["CheckpointRequest", "EXIT_CHECKPOINTED"]

#: Exit status of a run that wrote a checkpoint on request (the job script requeues the job).
EXIT_CHECKPOINTED = 85


class CheckpointRequest:
    """A flag raised by SIGUSR1 (or :meth:`request`), agreed on by every rank of ``team``.
    Creating one is local; :meth:`due` is collective.

    Parameters
    ----------
    team : Team
        The ranks that must agree.
    every : int
        Agree every ``every`` steps (one small allreduce each time); the signal is honoured at the
        next agreement point.
    signum : int
        The signal to listen for (default SIGUSR1).
    start : int
        Steps already done when the run began (after a restart), so that a drill step
        (``HPCSUITE_CHECKPOINT_AT_STEP``) already passed is not requested again.
    """

    def __init__(self, team, every: int = 1, signum: int = signal.SIGUSR1, start: int = 0):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.team, self.every, self._flag = team, every, False
        # HPCSUITE_CHECKPOINT_AT_STEP=N: request a checkpoint at the first check at or after step N
        # (for tests and drills; a run restarted past N is not asked again)
        at = os.environ.get("HPCSUITE_CHECKPOINT_AT_STEP", "")
        self._at = int(at) if at.isdigit() else None
        self._done = start          # steps completed when the previous check happened
        try:
            self._previous = signal.signal(signum, self._handler)
            self._signum = signum
        except ValueError:             # not the main thread: polling only
            self._previous, self._signum = None, None

    def _handler(self, signum, frame) -> None:
        self._flag = True

    def request(self) -> None:
        """Raise the flag on this rank (as the signal would). Local."""
        self._flag = True

    def due(self, step: int) -> bool:
        """Whether to checkpoint after ``step``. Collective every ``every`` steps (an allreduce),
        local and ``False`` in between."""
        if self._at is not None and self._done < self._at <= step + 1:
            self._flag = True
        self._done = step + 1
        if (step + 1) % self.every:
            return False
        from mpi4py import MPI
        return bool(self.team.allreduce(int(self._flag), op=MPI.MAX))

    def close(self) -> None:
        """Restore the previous signal handler. Local."""
        if self._signum is not None:
            signal.signal(self._signum, self._previous)
            self._signum = None

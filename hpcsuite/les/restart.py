"""What a restarted run needs beside its checkpoint: the statistics and cross-section accumulators.

The fields and time go into the checkpoint itself (:func:`hpcsuite.les.io.save_checkpoint`); the
averages a run has accumulated so far are pickled by rank 0 into ``<checkpoint>.outputs.pkl``
(:func:`outputs_state_path`) with the time they belong to, so that a run continued from the
checkpoint continues its averages instead of starting them again.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["outputs_state_path", "save_outputs_state", "load_outputs_state"]


def outputs_state_path(ckpt) -> Path:
    """Where the statistics and cross-section accumulators go beside the checkpoint ``ckpt``. Local."""
    return Path(f"{ckpt}.outputs.pkl")


def _state_of(obj) -> dict | None:
    return None if obj is None else {k: v for k, v in vars(obj).items() if k not in ("team", "grid")}


def save_outputs_state(ckpt, t: float, stats, sections, team) -> None:
    """Rank 0 pickles the accumulated statistics and cross-sections (time ``t``) beside the
    checkpoint, atomically, so that a restarted run continues its averages. Collective (barrier).

    Parameters
    ----------
    ckpt : str or Path
        The checkpoint file.
    t : float
        The model time of the checkpoint.
    stats : Statistics or None
        The run's statistics (every attribute but ``team`` and ``grid`` is saved).
    sections : CrossSections or None
        The run's cross-sections (likewise).
    team : Team
        The run's ranks.
    """
    if team.rank == 0:
        import os
        import pickle
        path = outputs_state_path(ckpt)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part-{os.getpid()}")
        with open(tmp, "wb") as f:
            pickle.dump({"t": float(t), "stats": _state_of(stats), "sections": _state_of(sections)}, f)
        os.replace(tmp, path)
    team.barrier()


def load_outputs_state(ckpt, t: float, stats, sections, team) -> bool:
    """Restore what :func:`save_outputs_state` wrote for the checkpoint time ``t`` (on every rank:
    the statistics are kept alike everywhere). Collective (rank 0 reads, then a broadcast).

    Returns
    -------
    bool
        False when there is no state for ``t`` (missing, or from another checkpoint) and there are
        accumulators to restore; the objects are then left as they are.
    """
    state = None
    path = outputs_state_path(ckpt)
    if team.rank == 0 and path.is_file():
        import pickle
        with open(path, "rb") as f:
            state = pickle.load(f)
        if state.get("t") != float(t):
            state = None
    state = team.bcast(state)
    if state is None:
        return stats is None and sections is None
    for obj, key in ((stats, "stats"), (sections, "sections")):
        if obj is not None and state.get(key) is not None:
            vars(obj).update(state[key])
    return True

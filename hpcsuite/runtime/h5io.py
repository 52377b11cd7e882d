"""Collective parallel-HDF5 output that is complete or absent.

Every rank writes its own block of each dataset through the ``mpio`` driver in one collective call.
On one rank the file is a plain one, so a serial h5py (one built without MPI) works there too; on
more ranks a serial h5py is refused with one clear error, the same on every rank.
The file is written under a temporary name in the destination folder and renamed when it is closed,
so a reader (or a crashed job) never sees a half-written file under the final name.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

__all__ = ["atomic_parallel_file", "collective", "open_parallel", "require_parallel_h5py",
           "write_blocks_hdf5"]


def require_parallel_h5py(team, what) -> None:
    """Raise ``InputError`` (on every rank alike) when ``team`` has several ranks and h5py was built
    without MPI, so ``what`` (a file, a deck) cannot be read or written in parallel. Local."""
    import h5py

    if team.size > 1 and not h5py.get_config().mpi:
        from .errors import InputError
        raise InputError(f"{what}: parallel HDF5 on {team.size} ranks needs h5py built with MPI, but this "
                         f"h5py is serial; run on 1 rank, or use the suite's environment "
                         f"(scripts/setup.sh builds h5py against parallel HDF5)")


def open_parallel(path, mode: str, team):
    """``h5py.File(path, mode)`` opened by every rank of ``team``. Collective.

    The ``mpio`` driver on several ranks; a plain file on one (so a serial h5py works there).
    """
    import h5py

    if team.size == 1:
        return h5py.File(path, mode)
    require_parallel_h5py(team, path)
    return h5py.File(path, mode, driver="mpio", comm=team.comm)


def collective(dset):
    """``with collective(dset):`` makes the transfers inside collective on an ``mpio`` file; on a
    plain (one-rank) file it does nothing."""
    return dset.collective if dset.file.driver == "mpio" else contextlib.nullcontext()


@contextlib.contextmanager
def atomic_parallel_file(path: str | os.PathLike, team):
    """Open ``path`` for writing (:func:`open_parallel`) under a temporary name. Collective.

    Yields the open ``h5py.File``; on a clean exit it is closed on every rank and renamed to
    ``path`` by rank 0 (``os.replace``: atomic on one filesystem) before any rank returns. On an
    exception the file is not closed here (closing is collective, and the other ranks may not have
    failed): the abort path (see ``runtime.errors``) ends the job, ``path`` is untouched and only the
    hidden temporary remains.
    """
    final = Path(path)
    tmp = err = None
    if team.rank == 0:
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = str(final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"))
        except OSError as exc:
            err = f"{path}: cannot create the output folder: {exc}"
    tmp, err = team.bcast((tmp, err))
    if err:                               # the same error on every rank, nothing hangs
        raise OSError(err)
    f = open_parallel(tmp, "w", team)
    yield f
    f.close()
    team.barrier()                       # every rank has closed (and flushed) its part
    if team.rank == 0:
        os.replace(tmp, final)
    team.barrier()                       # no rank returns before the final name exists


def write_blocks_hdf5(path: str | os.PathLike, team, global_shape: Sequence[int],
                      starts: Sequence[int], fields: Mapping[str, np.ndarray],
                      attrs: Mapping[str, object] | None = None) -> None:
    """Write each rank's block of several global arrays into one HDF5 file. Collective.

    Parameters
    ----------
    path : path-like
        Destination; written atomically (temporary name, then rename).
    team : Team
        The ranks writing; each passes its own block.
    global_shape : sequence of int
        Shape of every dataset.
    starts : sequence of int
        Global index of this rank's block's first element (block shape = ``field.shape``).
    fields : mapping name -> ndarray
        The local blocks, the same names and dtypes on every rank.
    attrs : mapping, optional
        File attributes (same values on every rank: metadata writes are collective).
    """
    with atomic_parallel_file(path, team) as f:
        for k, v in (attrs or {}).items():
            f.attrs[k] = v
        for name, block in fields.items():
            block = np.ascontiguousarray(block)
            dset = f.create_dataset(name, shape=tuple(global_shape), dtype=block.dtype)
            sel = tuple(slice(s, s + m) for s, m in zip(starts, block.shape))
            with collective(dset):
                if block.size:
                    dset[sel] = block
                else:  # a rank without data still takes part in the collective write
                    dset.id.write(h5py_empty_space(dset), h5py_empty_space(dset), block)


def h5py_empty_space(dset):
    """An empty selection on ``dset``'s dataspace (for ranks that write nothing collectively)."""
    space = dset.id.get_space()
    space.select_none()
    return space

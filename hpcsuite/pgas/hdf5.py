"""Parallel HDF5 I/O of distributed arrays: :func:`save_hdf5` and :func:`load_hdf5`.

Both are collective over the array's team and use the ``mpio`` driver with collective transfers.
Each rank reads or writes its own elements in one call: its file selection is the union of its
owned blocks, built per dimension as at most two *regular* hyperslabs (the full blocks, with
stride ``b * p``, and a partial last block), so a rank never makes more than ``2**ndim`` selection
calls whatever the number of blocks. Local indices increase with global ones along every
dimension, so the selection's row-major order is the local block's row-major order; halos are
skipped with a memory-space selection (no copy), TILE storage is rearranged into a copy first.

When the file runs of a rank are tiny (CYCLIC along the last dimension, say) the array goes
through a ``BLOCKED`` temporary instead (one :func:`~hpcsuite.pgas.copy`, then one contiguous
hyperslab per rank); see ``_via_blocked`` for the rule and the measurements behind it.

Errors in the arguments are raised on every rank alike before any communication; problems with
the file (missing, not HDF5, no such dataset) are checked by rank 0 and broadcast, so every rank
raises the same ``FileNotFoundError``/``KeyError``/``ValueError`` with a one-line message naming
the path and the dataset.

Examples
--------
With ``mpiexec -n 4``::

    >>> a = pgas.arange(100, dist=pgas.CYCLIC)
    >>> pgas.save_hdf5(a, "out/a.h5", "a", attrs={"step": 3})   # out/a.h5 is complete or absent
    >>> b = pgas.load_hdf5("out/a.h5", "a", dist=pgas.BLOCKED, halo=1)
"""
from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..runtime import Team
from ..runtime.h5io import atomic_parallel_file, open_parallel
from .array import DistArray, mpi_type
from .dist import BLOCKED, NONE
from .pattern import Pattern
from .redistribute import copy

__all__ = ["save_hdf5", "load_hdf5"]

MODES = ("w", "a")

#: Contiguous runs in the file shorter than this many elements make the direct transfer slow ...
MIN_RUN_ELEMENTS = 2
#: ... for arrays of at least this many bytes, which then go through a BLOCKED temporary.
MIN_REDISTRIBUTE_BYTES = 1 << 20


# ---------------------------------------------------------------------- selections
def dim_hyperslabs(m, c: int) -> list[tuple[int, int, int, int]]:
    """The indices coordinate ``c`` owns along one dimension as regular hyperslabs. Local.

    Returns at most two ``(start, stride, count, block)`` tuples (the full blocks, then a partial
    last block), ``[]`` when ``c`` owns nothing. Closed form: O(1) however many blocks there are
    (``DimMap.owned_runs`` lists them one by one).
    """
    size = m.size(c)
    if size == 0:
        return []
    if not m.cyclic or m.p == 1:
        start = m.start(c) if not m.cyclic else 0
        return [(start, size, 1, size)]
    b, step = m.b, m.b * m.p
    first = c * b
    nruns = -(-(m.n - first) // step)
    last = first + (nruns - 1) * step
    tail = min(b, m.n - last)
    full = nruns if tail == b else nruns - 1
    out = [(first, step, full, b)] if full else []
    if tail < b:
        out.append((last, tail, 1, tail))
    return out


def _select_owned(space, pattern: Pattern, unit: int) -> None:
    """Select ``unit``'s elements in the file dataspace ``space`` (nothing if it owns none)."""
    from h5py import h5s

    per_dim = [dim_hyperslabs(m, c) for m, c in zip(pattern.maps, pattern.unit_coords(unit))]
    if any(not p for p in per_dim):
        space.select_none()
        return
    op = h5s.SELECT_SET
    for combo in itertools.product(*per_dim):   # the pieces are disjoint per dimension
        start, stride, count, block = zip(*combo)
        space.select_hyperslab(start, count, stride, block, op=op)
        op = h5s.SELECT_OR


def file_run_elements(pattern: Pattern) -> int:
    """Length in elements of a typical contiguous run of one unit's elements in the file. Local.

    Row-major: the last dimension's run (its block, or the whole extent when it is not split),
    times the next dimension's while the dimensions after it are whole.
    """
    run = 1
    for m in reversed(pattern.maps):
        if m.p == 1:
            run *= max(m.n, 1)
            continue
        run *= max(1, min(m.b if m.cyclic else m.n // m.p, m.n))
        break
    return run


def _via_blocked(pattern: Pattern, itemsize: int) -> bool:
    """Whether to move the data through a BLOCKED temporary instead of selecting it in place.

    The same answer on every rank (it depends on the pattern only): yes for single-element runs
    in the file (CYCLIC along the last split dimension) of arrays of 1 MiB or more.

    Measured at 2 ranks on a shared 2-core machine, 4M doubles, best of 5, save / load in ms
    (temporary "cold": first use, ``copy`` plans its datatypes; "warm": plan cached):

    ===============  ==========  =================  =================
    distribution     in place    via BLOCKED, cold  via BLOCKED, warm
    ===============  ==========  =================  =================
    BLOCKED          124 / 56    (not used)
    CYCLIC           896 / 694   428 / 380          178 / 132
    BLOCKCYCLIC(2)   374 / 400   2603 / 2472        214 / 296
    BLOCKCYCLIC(16)  118 / 126   2512 / 2471        308 / 316
    ===============  ==========  =================  =================

    In place costs grow with the number of runs (MPI-IO flattens the selection), so only
    single-element runs are worth redistributing; ``copy`` plans block-cyclic layouts other than
    CYCLIC per run in Python, which is what makes those cold cases slow. CYCLIC at 1 MiB (128K
    doubles): 33 / 14 in place, 27 / 10 via BLOCKED; below that it makes no difference.
    """
    return (pattern.nunits > 1 and file_run_elements(pattern) < MIN_RUN_ELEMENTS
            and pattern.size * itemsize >= MIN_REDISTRIBUTE_BYTES)


def _blocked_like(a: DistArray) -> DistArray:
    """A new array with ``a``'s shape, dtype and team, BLOCKED along dimension 0 only: one
    contiguous run per rank in the file."""
    return DistArray(a.shape, a.dtype, dist=(BLOCKED,) + (NONE,) * (a.ndim - 1), team=a.team)


def _memory(a: DistArray, for_read: bool):
    """``(buffer, memory dataspace)`` for ``a``'s owned elements in local-index order.

    The buffer is the host storage itself (the halo deselected) except for TILE patterns, whose
    tile-major storage needs a copy in local-index order (to fill on reads, from it on writes).
    """
    from h5py import h5s

    p, rank = a.pattern, a.team.rank
    ls = p.local_shape(rank)
    if math.prod(ls) == 0:
        space = h5s.create_simple((1,))
        space.select_none()                    # still takes part in the collective transfer
        return np.empty(1, a.dtype), space
    if p.tiled:
        buf = np.empty(ls, a.dtype) if for_read else np.ascontiguousarray(p.storage_to_local(a.segment.array))
        return buf, h5s.create_simple(ls)
    buf = a.segment.array                         # C-contiguous, with the halo around the owned block
    space = h5s.create_simple(buf.shape)
    if any(a.halo_width):
        space.select_hyperslab(tuple(a.halo_width), (1,) * a.ndim, None, ls)
    return buf, space


def _collective_dxpl(dset):
    if dset.file.driver != "mpio":                 # one rank, plain file (runtime.h5io.open_parallel)
        return None
    from h5py import h5fd, h5p

    dxpl = h5p.create(h5p.DATASET_XFER)
    dxpl.set_dxpl_mpio(h5fd.MPIO_COLLECTIVE)
    return dxpl


def _write_direct(dset, a: DistArray) -> None:
    """Every rank writes its owned elements into ``dset`` in one collective call."""
    buf, mspace = _memory(a, for_read=False)
    fspace = dset.id.get_space()
    _select_owned(fspace, a.pattern, a.team.rank)
    dset.id.write(mspace, fspace, buf, dxpl=_collective_dxpl(dset))


def _read_direct(dset, a: DistArray) -> None:
    """Every rank reads its owned elements from ``dset`` in one collective call."""
    buf, mspace = _memory(a, for_read=True)
    fspace = dset.id.get_space()
    _select_owned(fspace, a.pattern, a.team.rank)
    dset.id.read(mspace, fspace, buf, dxpl=_collective_dxpl(dset))
    if a.pattern.tiled and a.pattern.local_size(a.team.rank):
        a.segment.array[...] = a.pattern.local_to_storage(buf)


def _write(dset, a: DistArray) -> None:
    if a.size == 0:
        return
    if not _via_blocked(a.pattern, a.dtype.itemsize):
        _write_direct(dset, a)
        return
    with _blocked_like(a) as tmp:
        copy(a, tmp)
        _write_direct(dset, tmp)


def _read(dset, a: DistArray) -> None:
    if a.size == 0:
        return
    if not _via_blocked(a.pattern, a.dtype.itemsize):
        _read_direct(dset, a)
        return
    with _blocked_like(a) as tmp:
        _read_direct(dset, tmp)
        copy(tmp, a)


# ---------------------------------------------------------------------- argument checks
def _as_path(path, who: str, name) -> Path:
    try:
        return Path(os.fspath(path))
    except TypeError:
        raise ValueError(f"{who}: path must be a str or path-like, got {path!r} "
                         f"(dataset {name!r})") from None


def _check_name(name, who: str, path) -> None:
    """A dataset path: ``"u"``, ``"fields/u"`` or ``"/fields/u"``, no empty, ``.`` or ``..`` part."""
    parts = name.lstrip("/").split("/") if isinstance(name, str) else [""]
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{who}: dataset name must be a non-empty string of '/'-separated names "
                         f"(no empty, '.' or '..' parts), got {name!r} (file {path})")


def _check_attrs(attrs, path, name) -> None:
    """Raise ``ValueError`` unless h5py can store every attribute (tried in an in-memory file)."""
    import h5py

    if attrs is None:
        return
    if not isinstance(attrs, Mapping):
        raise ValueError(f"save_hdf5: attrs must be a mapping, got {type(attrs).__name__} "
                         f"(file {path}, dataset {name!r})")
    if not attrs:
        return
    with h5py.File(f"attrs-check-{id(attrs)}", "w", driver="core", backing_store=False) as f:
        for k, v in attrs.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"save_hdf5: attribute names must be non-empty strings, got {k!r} "
                                 f"(file {path}, dataset {name!r})")
            try:
                f.attrs[k] = v
            except Exception as exc:  # noqa: BLE001 - whatever h5py refuses
                raise ValueError(f"save_hdf5: attribute {k!r} cannot be stored in HDF5 ({exc}) "
                                 f"(file {path}, dataset {name!r})") from None


_ERRORS = {"FileNotFoundError": FileNotFoundError, "KeyError": KeyError, "ValueError": ValueError}


def _rank0_verdict(team: Team, where: str, check, *args, as_barrier: bool = False):
    """Run ``check(*args)`` on rank 0 and broadcast the outcome. Collective.

    Returns its result on every rank, or raises its error (as ``FileNotFoundError``, ``KeyError``
    or ``ValueError``, with rank 0's one-line message, prefixed with ``where`` unless it starts
    with it) on every rank, so that ranks agree even where they see the filesystem differently.
    ``as_barrier``: exchange it with an allgather, which no rank leaves before every rank has
    entered (saving a separate barrier).
    """
    verdict = None
    if team.rank == 0:
        try:
            verdict = ("ok", check(*args))
        except Exception as exc:  # noqa: BLE001 - any failure is reported to every rank
            kind = type(exc).__name__ if type(exc).__name__ in _ERRORS else "ValueError"
            msg = " ".join(str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).split())
            if not msg.startswith(where):
                msg = f"{where}: {type(exc).__name__}: {msg}"
            verdict = (kind, msg)
    kind, payload = team.allgather(verdict)[0] if as_barrier else team.bcast(verdict)
    if kind != "ok":
        raise _ERRORS[kind](payload)
    return payload


def _save_where(path: Path, name: str) -> str:
    return f"save_hdf5: cannot write dataset {name!r} to {path}"


def _load_where(path: Path, name: str) -> str:
    return f"load_hdf5: cannot read dataset {name!r} from {path}"


def _check_target(path: Path, name: str, mode: str, attrs: dict) -> dict:
    """Rank 0: can ``save_hdf5`` write ``name`` into ``path`` with ``mode``? Returns ``attrs``
    (rank 0's, sent to every rank with the verdict)."""
    import h5py

    where = _save_where(path, name)
    if mode == "w":
        if path.is_dir():
            raise ValueError(f"{where}: it is a directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"{where}: cannot create its folder ({exc.strerror})") from None
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise ValueError(f"{where}: its folder is not writable")
        return attrs
    if not path.exists():
        raise FileNotFoundError(f"{where}: no such file (mode='a' adds to an existing file; "
                                f"use mode='w' to create one)")
    if not path.is_file() or not h5py.is_hdf5(path):
        raise ValueError(f"{where}: not an HDF5 file")
    if not os.access(path, os.W_OK):
        raise ValueError(f"{where}: the file is not writable")
    with h5py.File(path, "r") as f:
        obj = f.get(name)
        if obj is not None and not isinstance(obj, h5py.Dataset):
            raise ValueError(f"{where}: {name!r} is a group, not a dataset")
        parts = name.lstrip("/").split("/")
        for k in range(1, len(parts)):         # the groups it goes into: absent, or groups
            parent = "/".join(parts[:k])
            if parent in f and not isinstance(f[parent], h5py.Group):
                raise ValueError(f"{where}: {parent!r} is a dataset, not a group")
    return attrs


def _inspect_source(path: Path, name: str) -> tuple[tuple[int, ...], str]:
    """Rank 0: the shape and (native) dtype of dataset ``name`` in ``path``."""
    import h5py

    where = _load_where(path, name)
    if not path.exists():
        raise FileNotFoundError(f"{where}: no such file")
    if not path.is_file() or not h5py.is_hdf5(path):
        raise ValueError(f"{where}: not an HDF5 file")
    with h5py.File(path, "r") as f:
        obj = f.get(name)
        if obj is None:
            raise KeyError(f"{where}: no such dataset (it has {sorted(f.keys())})")
        if not isinstance(obj, h5py.Dataset):
            raise ValueError(f"{where}: {name!r} is a group, not a dataset")
        shape, dtype = obj.shape, obj.dtype
    if not shape:
        raise ValueError(f"{where}: it is a scalar (or empty) dataset; a DistArray needs at least one dimension")
    if dtype.kind not in "biufc" or dtype.fields is not None:
        raise ValueError(f"{where}: its type {dtype} is not numeric")
    dtype = dtype.newbyteorder("=")            # HDF5 converts byte order while reading
    try:
        mpi_type(dtype)
    except ValueError:
        raise ValueError(f"{where}: its type {dtype} has no MPI equivalent") from None
    return tuple(int(n) for n in shape), dtype.str


# ---------------------------------------------------------------------- public API
def save_hdf5(a: DistArray, path, name: str, attrs: Mapping | None = None, mode: str = "w") -> None:
    """Write the distributed array ``a`` as dataset ``name`` of an HDF5 file. Collective over
    ``a.team``.

    The dataset has ``a``'s global shape and dtype (contiguous layout). Every rank writes its
    owned elements with one collective ``mpio`` transfer; halos are not written. Outstanding
    one-sided writes to ``a`` are completed first, as by ``a.sync()`` (a GPU array's device block
    is copied to the host first, as by ``update_host()``).

    Parameters
    ----------
    a : DistArray
        Any distribution (BLOCKED, CYCLIC, BLOCKCYCLIC, TILE, NONE), with or without halos.
    path : str or path-like
        The file. A folder that every rank of the team sees (a parallel or shared filesystem).
    name : str
        Dataset name; may contain groups (``"fields/u"``), which are created.
    attrs : mapping, optional
        Attributes of the dataset. Rank 0's values are written (HDF5 metadata must be identical
        on every rank), so a timestamp taken on each rank is harmless.
    mode : {"w", "a"}
        ``"w"``: a new file (an existing one is replaced), written atomically: under a temporary
        name in the same folder, renamed when complete, so ``path`` is complete or absent, never
        half-written. ``"a"``: add ``name`` to the existing file ``path``, replacing a dataset of
        that name (its old space is not reclaimed). Not atomic: a crash while writing can leave
        the file damaged.

    Raises
    ------
    ValueError
        On every rank, before communicating: ``a`` is not a live DistArray, bad ``path``, ``name``,
        ``attrs`` or ``mode``. After rank 0 checked the target (on every rank): a directory or an
        unwritable folder; with mode ``"a"`` a file that is not HDF5 or not writable, a group
        named ``name`` or a dataset where ``name`` needs a group.
    FileNotFoundError
        On every rank: ``mode="a"`` and ``path`` does not exist.
    """
    if not isinstance(a, DistArray):
        raise ValueError(f"save_hdf5: expected a DistArray, got {type(a).__name__} "
                         f"(file {path}, dataset {name!r})")
    path = _as_path(path, "save_hdf5", name)
    _check_name(name, "save_hdf5", path)
    if mode not in MODES:
        raise ValueError(f"save_hdf5: mode must be 'w' (new file) or 'a' (add to an existing file), "
                         f"got {mode!r} (file {path}, dataset {name!r})")
    if a.freed:
        raise ValueError(f"save_hdf5: the array was freed (file {path}, dataset {name!r})")
    _check_attrs(attrs, path, name)
    team = a.team
    # a.sync() folded into the verdict's exchange: complete my one-sided writes (and copy a GPU
    # block to the host storage that is written), wait for every rank, then see theirs
    if a.device_storage is not None:
        a.segment.array[...] = a.device.to_host(a.device_storage)
    a.flush()
    attrs = _rank0_verdict(team, _save_where(path, name), _check_target, path, name, mode,
                           dict(attrs or {}), as_barrier=True)
    a.segment.shm_win.Sync()
    if mode == "w":
        with atomic_parallel_file(path, team) as f:
            _write_dataset(f, a, name, attrs)
    else:
        with open_parallel(path, "r+", team) as f:
            if name in f:
                del f[name]
            _write_dataset(f, a, name, attrs)
        team.barrier()                     # no rank returns before every rank has closed the file


def _write_dataset(f, a: DistArray, name: str, attrs: Mapping) -> None:
    # every element is written, so filling the dataset first would only cost time
    dset = f.create_dataset(name, shape=a.shape, dtype=a.dtype, fill_time="never")
    for k, v in attrs.items():
        dset.attrs[k] = v
    _write(dset, a)


def load_hdf5(path, name: str, dist=BLOCKED, team: Team | None = None, grid=None, **kw) -> DistArray:
    """A new DistArray holding dataset ``name`` of an HDF5 file. Collective over ``team``.

    The array has the dataset's shape and dtype (in native byte order) and the requested
    distribution; every rank reads its owned elements with one collective ``mpio`` transfer
    (large arrays with single-element runs in the file: through a BLOCKED temporary). Halo cells
    are not filled (call ``a.halo.update()``).

    Parameters
    ----------
    path : str or path-like
        The file (seen by every rank).
    name : str
        Dataset name (may contain groups).
    dist, team, grid, **kw
        As for :class:`~hpcsuite.pgas.DistArray` (``halo=``, ``boundary=``, ``device=``, ...).

    Raises
    ------
    FileNotFoundError
        On every rank: ``path`` does not exist.
    KeyError
        On every rank: the file has no dataset ``name``.
    ValueError
        On every rank: bad arguments; the file is not HDF5; ``name`` is a group or a scalar
        dataset or has a non-numeric type; the distribution does not fit the dataset's shape.
    """
    path = _as_path(path, "load_hdf5", name)
    _check_name(name, "load_hdf5", path)
    team = team if team is not None else Team.world()
    if not isinstance(team, Team):
        raise ValueError(f"load_hdf5: team must be a Team, got {team!r} (file {path}, dataset {name!r})")
    shape, dstr = _rank0_verdict(team, _load_where(path, name), _inspect_source, path, name)
    try:
        a = DistArray(shape, np.dtype(dstr), dist=dist, team=team, grid=grid, **kw)
    except ValueError as exc:
        raise ValueError(f"load_hdf5: dataset {name!r} of {path} (shape {shape}): {exc}") from None
    with open_parallel(path, "r", team) as f:
        _read(f[name], a)
    a.update_device() if a.device.is_gpu else a.sync()   # other ranks may read it one-sided at once
    return a

"""The one client API of every staging backend: named objects holding bytes, NumPy arrays or files.

A :class:`Store` keeps named objects (names are ``/``-separated paths such as ``run1/proj.npy``).
Every object is written through a :class:`Writer` that streams it in chunks and computes its
SHA-256 on the way; the checksum is stored with the object and verified whenever the whole object is
read back (:meth:`Store.get_bytes`, :meth:`Store.get_array`, :meth:`Store.get_file`). Writes are
atomic: an object is invisible until its writer commits, and a reader sees either the old or the
new object, never a torn one.

Backends implement five primitives (``_writer``, ``_open``, ``info``, ``list``, ``delete``); the
rest (arrays, files, directory staging) is here, once. All methods are local (no MPI): the
collective, rank-parallel staging is in :mod:`hpcsuite.staging.parallel`.

Examples
--------
>>> store = TmpfsStore("/dev/shm/mine")                         # doctest: +SKIP
>>> store.put_array("a", np.arange(6.0).reshape(2, 3))           # doctest: +SKIP
>>> store.get_array("a").shape                                   # doctest: +SKIP
(2, 3)
"""
from __future__ import annotations

import hashlib
import io
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from hpcsuite.runtime import HpcsuiteError, InputError

__all__ = ["Store", "Writer", "ObjectInfo", "StagingError", "ChecksumError", "check_name",
           "CHUNK", "copy_stream"]

CHUNK = 4 << 20      # streaming unit: 4 MiB (the RADOS object size Ceph tunes for)


class StagingError(HpcsuiteError):
    """A staging operation failed (a daemon gone, a timeout, a missing object)."""


class ChecksumError(StagingError):
    """The bytes read back do not match the checksum stored with the object."""


@dataclass(frozen=True)
class ObjectInfo:
    """What the store knows about one object: its size in bytes and its SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


def check_name(name: str) -> str:
    """Validate an object name; return it. Raises :class:`InputError` naming the problem.

    Names are relative ``/``-separated paths; no component may be empty, ``..`` or start with ``.``
    (hidden names are the stores' own temporaries).
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"object name must be a non-empty string, got {name!r}")
    if len(name) > 400 or "\0" in name or "\\" in name:
        raise InputError(f"object name {name[:60]!r} is too long or holds a NUL or backslash")
    parts = name.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        raise InputError(f"object name {name!r}: components must be non-empty and not start with '.' "
                         "(no absolute paths, no '..')")
    return name


class Writer:
    """Streams one object into a store; nothing is visible until :meth:`commit`.

    Use as a context manager: a clean exit commits, an exception aborts (removes the partial data).
    Backends subclass it and implement ``_write(chunk)``, ``_commit(info)`` and ``_abort()``.
    """

    def __init__(self, name: str):
        self.name = check_name(name)
        self._hash = hashlib.sha256()
        self.size = 0
        self._done = False
        self.result: ObjectInfo | None = None    # set by commit()

    def write(self, data) -> int:
        """Append ``data`` (bytes-like). Local."""
        mv = memoryview(data).cast("B")
        if mv.nbytes:
            self._hash.update(mv)
            self._write(mv)
            self.size += mv.nbytes
        return mv.nbytes

    def commit(self) -> ObjectInfo:
        """Make the object visible under its name, with its size and checksum. Local."""
        info = ObjectInfo(self.name, self.size, self._hash.hexdigest())
        self._commit(info)
        self._done = True
        self.result = info
        return info

    def abort(self) -> None:
        """Drop what was written. Local; safe to call twice."""
        if not self._done:
            self._done = True
            self._abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False

    # backend hooks
    def _write(self, mv: memoryview) -> None:
        raise NotImplementedError

    def _commit(self, info: ObjectInfo) -> None:
        raise NotImplementedError

    def _abort(self) -> None:
        raise NotImplementedError


class _VerifyingReader(io.RawIOBase):
    """A read-only stream over an object that checks its SHA-256 when the end is reached."""

    def __init__(self, raw: BinaryIO, info: ObjectInfo, verify: bool):
        self._raw, self._info, self._verify = raw, info, verify
        self._hash = hashlib.sha256() if verify else None
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._raw.readinto(b)
        if n:
            if self._hash is not None:
                self._hash.update(memoryview(b)[:n])
            self._seen += n
        elif self._verify:
            self._check()
        return n

    def _check(self) -> None:
        if self._seen != self._info.size:
            raise ChecksumError(f"object {self._info.name!r}: read {self._seen} bytes, stored size is "
                                f"{self._info.size}")
        got = self._hash.hexdigest()
        if got != self._info.sha256:
            raise ChecksumError(f"object {self._info.name!r}: checksum mismatch (sha256 {got[:16]}... "
                                f"read back, {self._info.sha256[:16]}... stored)")
        self._verify = False

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def copy_stream(src: BinaryIO, write, chunk: int = CHUNK) -> int:
    """Copy ``src`` to the ``write`` callable in chunks of ``chunk`` bytes; return the byte count."""
    buf = bytearray(chunk)
    mv = memoryview(buf)
    total = 0
    while True:
        n = src.readinto(buf)
        if not n:
            return total
        write(mv[:n])
        total += n


class Store:
    """Base class of the staging backends (``tmpfs``, ``cephfs``, ``rados``, ``s3``). Local."""

    backend = "?"
    #: True where objects are plain files that programs may open by path (:meth:`path`)
    posix = False

    # ------------------------------------------------------------------ backend primitives
    def writer(self, name: str) -> Writer:
        """A :class:`Writer` for ``name`` (replaces the object when committed). Local."""
        return self._writer(check_name(name))

    def open(self, name: str, verify: bool = True) -> BinaryIO:
        """A reader of the whole object (``read``/``readinto``); with ``verify``, reaching the end
        checks the size and checksum (raising :class:`ChecksumError`). Local."""
        info = self.info(name)
        return _VerifyingReader(self._open(info), info, verify)

    def info(self, name: str) -> ObjectInfo:
        """Size and checksum of ``name``; :class:`StagingError` if there is no such object. Local."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """Sorted names of the committed objects starting with ``prefix``. Local."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        """Remove ``name`` (no error if absent). Local."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections. Local."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _writer(self, name: str) -> Writer:
        raise NotImplementedError

    def _open(self, info: ObjectInfo) -> BinaryIO:
        raise NotImplementedError

    # ------------------------------------------------------------------ generic API
    def exists(self, name: str) -> bool:
        """Whether a committed object ``name`` exists. Local."""
        try:
            self.info(check_name(name))
            return True
        except StagingError:
            return False

    def put_bytes(self, name: str, data) -> ObjectInfo:
        """Store ``data`` (bytes-like) under ``name``. Local."""
        with self.writer(name) as w:
            mv = memoryview(data).cast("B")
            for i in range(0, mv.nbytes, CHUNK):
                w.write(mv[i:i + CHUNK])
        return w.result

    def get_bytes(self, name: str, verify: bool = True) -> bytes:
        """The whole object as bytes, checksum verified. Local."""
        with self.open(name, verify) as f:
            data = f.read()
            f.read()            # reach the end once more: the verifying reader checks there
        return data

    def put_array(self, name: str, array) -> ObjectInfo:
        """Store a NumPy array in ``.npy`` format (dtype, shape and order kept). Local.

        Streams the array's memory in chunks (no copy of a contiguous array)."""
        a = np.asanyarray(array)
        if a.dtype.hasobject:
            raise InputError(f"put_array {name!r}: object arrays cannot be stored (dtype {a.dtype})")
        with self.writer(name) as w:
            np.lib.format.write_array(w, a, allow_pickle=False)   # writes in 16 MiB pieces
        return w.result

    def get_array(self, name: str) -> np.ndarray:
        """Read back an array stored by :meth:`put_array`, checksum verified. Local."""
        with self.open(name) as f:
            try:
                a = np.lib.format.read_array(f, allow_pickle=False)
            except ValueError as exc:
                raise StagingError(f"object {name!r} is not a stored NumPy array: {exc}") from None
            if f.read(1):
                raise StagingError(f"object {name!r}: trailing bytes after the array")
        return a

    def put_file(self, name: str, path: str | os.PathLike) -> ObjectInfo:
        """Stream the file at ``path`` into ``name`` in chunks. Local."""
        with open(path, "rb", buffering=0) as src, self.writer(name) as w:
            copy_stream(src, w.write)
        return w.result

    def get_file(self, name: str, dest: str | os.PathLike) -> ObjectInfo:
        """Stream ``name`` into the file ``dest`` (atomically: temporary name, then rename) and
        verify the checksum before the rename; a mismatch leaves ``dest`` untouched. Local."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        info = self.info(name)
        try:
            with self.open(name) as src, open(tmp, "wb") as out:
                copy_stream(src, out.write)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
        return info

    # ------------------------------------------------------------------ staging of trees
    def stage_in(self, path: str | os.PathLike, name: str | None = None) -> list[str]:
        """Copy a file, or every file below a directory, into the store. Local.

        A file goes to ``name`` (default: its base name); a directory's files go to
        ``name/relative/path`` (default ``name``: the directory's base name). Returns the names.
        """
        pairs = plan_stage_in(path, name)
        for src, obj in pairs:
            self.put_file(obj, src)
        return [obj for _, obj in pairs]

    def stage_out(self, name: str, dest: str | os.PathLike) -> list[Path]:
        """Copy the object ``name`` to the file ``dest``, or, when ``name`` is a prefix of objects
        (``name/...``), every such object below the directory ``dest``. Checksums verified. Local."""
        pairs = plan_stage_out(self, name, dest)
        for obj, path in pairs:
            self.get_file(obj, path)
        return [p for _, p in pairs]

    def iter_infos(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for n in self.list(prefix):
            yield self.info(n)


def plan_stage_in(path, name: str | None) -> list[tuple[Path, str]]:
    """``(source file, object name)`` pairs for staging ``path`` in (sorted). Local."""
    src = Path(path)
    if not src.exists():
        raise InputError(f"stage in: {path}: no such file or directory")
    if src.is_file():
        return [(src, check_name(name or src.name))]
    base = name or src.resolve().name
    check_name(base)
    pairs = []
    for f in sorted(src.rglob("*")):
        if f.is_file():
            rel = f.relative_to(src).as_posix()
            pairs.append((f, check_name(f"{base}/{rel}")))
    return pairs


def plan_stage_out(store: Store, name: str, dest) -> list[tuple[str, Path]]:
    """``(object name, destination file)`` pairs for staging ``name`` out. Local."""
    check_name(name)
    dest = Path(dest)
    if store.exists(name):
        return [(name, dest / Path(name).name if dest.is_dir() else dest)]
    below = store.list(name + "/")
    if not below:
        raise StagingError(f"stage out: no object {name!r} and no objects below {name + '/'!r} "
                           f"in the {store.backend} store")
    return [(obj, dest / obj[len(name) + 1:]) for obj in below]

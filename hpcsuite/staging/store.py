"""The one client API of every staging backend: named objects holding bytes, NumPy arrays or files.

A :class:`Store` keeps named objects (names are ``/``-separated paths such as ``run1/proj.npy``).
Every object is written through a :class:`Writer` that streams it in chunks and computes its
checksum on the way (XXH3-128 by default, SHA-256 or CRC-32 on request: :mod:`.checksum`); the
checksum and the name of its algorithm are stored with the object and verified whenever the whole
object is read back (:meth:`Store.get_bytes`, :meth:`Store.get_array`, :meth:`Store.get_file`,
:meth:`Store.get_many`), in the same pass that moves the bytes. Writes are atomic: an object is
invisible until its writer commits, and a reader sees either the old or the new object, never a
torn one.

Backends implement five primitives (``_writer``, ``_open``, ``info``, ``list``, ``delete``); the
rest (arrays, files, directory staging, batches) is here, once, and a backend may replace any of it
with a faster path (one request per small object, several in flight, fewer copies). All methods are
local (no MPI): the collective, rank-parallel staging is in :mod:`hpcsuite.staging.parallel`.

Examples
--------
>>> store = TmpfsStore("/dev/shm/mine")                         # doctest: +SKIP
>>> store.put_array("a", np.arange(6.0).reshape(2, 3))           # doctest: +SKIP
>>> store.get_array("a").shape                                   # doctest: +SKIP
(2, 3)
>>> store.put_bytes("b", b"abc", checksum="sha256").algorithm    # doctest: +SKIP
'sha256'
"""
from __future__ import annotations

import io
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from hpcsuite.runtime import HpcsuiteError, InputError

from .checksum import available, check_algorithm, hasher

__all__ = ["Store", "Writer", "ObjectInfo", "StagingError", "ChecksumError", "check_name",
           "CHUNK", "copy_stream", "mapped_windows", "write_all", "info_from_record", "record_of", "verifier", "npy_header",
           "array_from_buffer", "check_read"]

CHUNK = 4 << 20      # streaming unit: 4 MiB (the RADOS object size Ceph tunes for)


class StagingError(HpcsuiteError):
    """A staging operation failed (a daemon gone, a timeout, a missing object)."""


class ChecksumError(StagingError):
    """The bytes read back do not match the checksum stored with the object."""


@dataclass(frozen=True)
class ObjectInfo:
    """What the store knows about one object: its size in bytes, its checksum (hex) and the name of
    the checksum's algorithm (``xxh3-128``, ``sha256`` or ``crc32``)."""

    name: str
    size: int
    checksum: str
    algorithm: str


def record_of(info: ObjectInfo) -> dict:
    """The commit record stored with an object (JSON-able): size, algorithm, checksum. Local."""
    return {"size": info.size, "algorithm": info.algorithm, "checksum": info.checksum}


def info_from_record(name: str, rec: dict) -> ObjectInfo:
    """The :class:`ObjectInfo` of a stored record: the current form, or the first form (``size`` and
    ``sha256`` only), so objects written before the algorithm was recorded stay readable. Local."""
    try:
        if "algorithm" in rec:
            return ObjectInfo(name, int(rec["size"]), str(rec["checksum"]), str(rec["algorithm"]))
        return ObjectInfo(name, int(rec["size"]), str(rec["sha256"]), "sha256")
    except (KeyError, TypeError, ValueError):
        raise StagingError(f"object {name!r}: unreadable commit record {str(rec)[:120]!r}") from None


def check_name(name: str) -> str:
    """Validate an object name; return it. Raises :class:`InputError` naming the problem. Local.

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


def verifier(info: ObjectInfo):
    """A fresh hasher for checking ``info``'s bytes; :class:`StagingError` saying what to install
    when its algorithm cannot be computed here. Local."""
    if not available(info.algorithm):
        raise StagingError(f"object {info.name!r} was stored with checksum {info.algorithm}, which "
                           "needs the xxhash package here (pip install xxhash), or read it with verify=False")
    return hasher(info.algorithm)


def check_read(info: ObjectInfo, h, seen: int) -> None:
    """Raise :class:`ChecksumError` unless ``seen`` bytes hashing to ``h`` are ``info``'s. Local."""
    if seen != info.size:
        raise ChecksumError(f"object {info.name!r}: read {seen} bytes, stored size is {info.size}")
    got = h.hexdigest()
    if got != info.checksum:
        raise ChecksumError(f"object {info.name!r}: checksum mismatch ({info.algorithm} {got[:16]}... "
                            f"read back, {info.checksum[:16]}... stored)")


class Writer:
    """Streams one object into a store; nothing is visible until :meth:`commit`. Local.

    Use as a context manager: a clean exit commits, an exception aborts (removes the partial data).
    The checksum (algorithm ``algorithm``) is computed on each piece as it is written. Backends
    subclass it and implement ``_write(chunk)``, ``_commit(info)`` and ``_abort()``.
    """

    def __init__(self, name: str, algorithm: str):
        self.name = check_name(name)
        self.algorithm = algorithm
        self._hash = hasher(algorithm)
        self.size = 0
        self._done = False
        self.result: ObjectInfo | None = None    # set by commit()

    #: hand the backend at most this many bytes at a time (0: all at once)
    piece = 0

    def write(self, data) -> int:
        """Append ``data`` (bytes-like). Local.

        Each piece is checksummed right after the backend has taken it, while the backend's own
        pass (a kernel copy, a copy into a request) has left it in the cache."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        step = self.piece or n
        for i in range(0, n, step):
            p = mv[i:i + step] if step < n else mv
            self._write(p)
            self._hash.update(p)
        self.size += n
        return n

    def commit(self) -> ObjectInfo:
        """Make the object visible under its name, with its size and checksum. Local."""
        info = ObjectInfo(self.name, self.size, self._hash.hexdigest(), self.algorithm)
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
    """A read-only stream over an object that checks its checksum when the end is reached."""

    def __init__(self, raw: BinaryIO, info: ObjectInfo, verify: bool):
        self._raw, self._info, self._verify = raw, info, verify
        self.info = info                 # what the store recorded for this object
        self._hash = verifier(info) if verify else None
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
            check_read(self._info, self._hash, self._seen)
            self._verify = False
        return n

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left when negative), read straight into the result
        where the underlying stream can (a file: one ``read``), checksummed."""
        if size is None or size < 0:
            return self.readall()
        data = self._raw.read(size)
        if data:
            if self._hash is not None:
                self._hash.update(data)
            self._seen += len(data)
        elif self._verify:
            check_read(self._info, self._hash, self._seen)
            self._verify = False
        return data

    def readall(self) -> bytes:
        """The rest of the object in one buffer (sized from the stored size), verified."""
        return bytes(self.read_whole())

    def read_whole(self) -> bytearray:
        """The rest of the object into one writable buffer, verified at its end."""
        buf = bytearray(max(0, self._info.size - self._seen))
        mv = memoryview(buf)
        got = 0
        while got < len(buf):
            n = self.readinto(mv[got:])
            if not n:
                break
            got += n
        if got == len(buf):
            extra = bytearray(1 << 16)
            while self.readinto(extra):      # more than the stored size: counted, then refused
                pass
        return buf

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


def mapped_windows(fd: int, size: int, window: int = 4 * CHUNK) -> Iterator[memoryview]:
    """The first ``size`` bytes of the open file ``fd`` as read-only memoryviews of ``window``
    bytes each, mapped (``mmap``, pages populated up front) rather than copied: the zero-copy way
    to checksum a file and hand its bytes to ``os.write``. Each view is released before the next
    one is made. Local."""
    import mmap
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    for off in range(0, size, window):
        length = min(window, size - off)
        mm = mmap.mmap(fd, length, flags=flags, prot=mmap.PROT_READ, offset=off)
        mv = memoryview(mm)
        try:
            yield mv
        finally:
            mv.release()
            mm.close()


def write_all(fd: int, mv: memoryview) -> None:
    """``os.write`` every byte of ``mv`` (a regular file may take fewer per call). Local."""
    done = 0
    while done < mv.nbytes:
        done += os.write(fd, mv[done:])


def npy_header(a: np.ndarray) -> bytes:
    """The ``.npy`` header of ``a`` (format 1.0, or 2.0 when the header needs it). Local."""
    out = io.BytesIO()
    d = np.lib.format.header_data_from_array_1_0(a)
    try:
        np.lib.format.write_array_header_1_0(out, d)
    except ValueError:
        out = io.BytesIO()
        np.lib.format.write_array_header_2_0(out, d)
    return out.getvalue()


def _array_bytes(a: np.ndarray):
    """A flat byte view of ``a``'s memory in the order its header names, or None (not contiguous)."""
    if a.flags.c_contiguous:
        return a.reshape(-1).view(np.uint8)
    if a.flags.f_contiguous:
        return a.T.reshape(-1).view(np.uint8)
    return None


def array_from_buffer(name: str, buf) -> np.ndarray:
    """The array stored in ``.npy`` form in the bytes-like ``buf``, as a view of ``buf`` (writable
    when ``buf`` is). :class:`StagingError` when ``buf`` is not exactly one ``.npy`` array. Local."""
    mv = memoryview(buf).cast("B")
    try:
        fp = io.BytesIO(bytes(mv[:12]))
        major, _ = np.lib.format.read_magic(fp)
        hsize = 2 if major == 1 else 4
        start = 8 + hsize + int.from_bytes(mv[8:8 + hsize], "little")
        fp = io.BytesIO(bytes(mv[:start]))
        np.lib.format.read_magic(fp)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(fp, max_header_size=1 << 20)
    except (ValueError, EOFError) as exc:
        raise StagingError(f"object {name!r} is not a stored NumPy array: {exc}") from None
    if dtype.hasobject:
        raise StagingError(f"object {name!r} holds an object array (dtype {dtype}): not loaded")
    count = int(np.prod(shape, dtype=np.int64))
    if start + count * dtype.itemsize != mv.nbytes:
        raise StagingError(f"object {name!r}: {mv.nbytes - start} bytes of array data, its header "
                           f"{shape} {dtype} says {count * dtype.itemsize} (trailing or missing bytes)")
    a = np.frombuffer(buf, dtype=dtype, count=count, offset=start)
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


class Store:
    """Base class of the staging backends (``tmpfs``, ``cephfs``, ``rados``, ``s3``). Local.

    ``checksum`` (set by every backend's constructor) is the algorithm of new objects; each write
    may choose another one (``checksum=`` of :meth:`writer` and the ``put_*`` methods).
    """

    backend = "?"
    #: True where objects are plain files that programs may open by path (:meth:`path`)
    posix = False
    #: checksum algorithm of new objects (see :mod:`hpcsuite.staging.checksum`)
    checksum = ""

    def _algorithm(self, checksum: str | None) -> str:
        return check_algorithm(checksum or self.checksum or None)

    # ------------------------------------------------------------------ backend primitives
    def writer(self, name: str, checksum: str | None = None) -> Writer:
        """A :class:`Writer` for ``name`` (replaces the object when committed); ``checksum``: its
        algorithm (default: the store's). Local."""
        return self._writer(name, self._algorithm(checksum))      # (the Writer checks the name)

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

    def _writer(self, name: str, algorithm: str) -> Writer:
        raise NotImplementedError

    def _open(self, info: ObjectInfo) -> BinaryIO:
        raise NotImplementedError

    def _read_whole(self, name: str, verify: bool = True):
        """The whole object in one writable buffer, verified (backends may read it faster)."""
        with self.open(name, verify) as f:
            return f.read_whole()

    # ------------------------------------------------------------------ generic API
    def exists(self, name: str) -> bool:
        """Whether a committed object ``name`` exists. Local."""
        try:
            self.info(check_name(name))
            return True
        except StagingError:
            return False

    def put_bytes(self, name: str, data, checksum: str | None = None) -> ObjectInfo:
        """Store ``data`` (bytes-like) under ``name``; ``checksum``: the algorithm (default: the
        store's). Local."""
        with self.writer(name, checksum) as w:
            mv = memoryview(data).cast("B")
            for i in range(0, mv.nbytes, CHUNK):
                w.write(mv[i:i + CHUNK])
        return w.result

    def get_bytes(self, name: str, verify: bool = True) -> bytes:
        """The whole object as bytes, checksum verified. Local."""
        with self.open(name, verify) as f:
            return f.readall()

    def put_many(self, items, checksum: str | None = None) -> list[ObjectInfo]:
        """Store many objects: ``items`` maps names to bytes-like data (a mapping or ``(name, data)``
        pairs). Backends keep several of them in flight. Returns their infos, in order. Local."""
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        for n, _ in pairs:
            check_name(n)
        return [self.put_bytes(n, d, checksum) for n, d in pairs]

    def iter_many(self, names: Iterable[str], verify: bool = True) -> Iterator[tuple[str, bytes]]:
        """``(name, bytes)`` of many objects, in order, each verified, while the next ones are
        already being fetched (backends keep several in flight); only what the caller keeps stays in
        memory. Local."""
        for n in [check_name(n) for n in names]:
            yield n, self.get_bytes(n, verify)

    def get_many(self, names: Iterable[str], verify: bool = True) -> list[bytes]:
        """The bytes of many objects, in order, each verified (:meth:`iter_many`). Local."""
        return [data for _, data in self.iter_many(names, verify)]

    def put_array(self, name: str, array, checksum: str | None = None) -> ObjectInfo:
        """Store a NumPy array in ``.npy`` format (dtype, shape and order kept). Local.

        A contiguous array's memory is written as it is (no copy); others in pieces."""
        a = np.asanyarray(array)
        if a.dtype.hasobject:
            raise InputError(f"put_array {name!r}: object arrays cannot be stored (dtype {a.dtype})")
        flat = _array_bytes(a)
        with self.writer(name, checksum) as w:
            if flat is None:
                np.lib.format.write_array(w, a, allow_pickle=False)   # writes in 16 MiB pieces
            else:
                w.write(npy_header(a))
                for i in range(0, flat.nbytes, CHUNK):
                    w.write(flat[i:i + CHUNK])
        return w.result

    def get_array(self, name: str) -> np.ndarray:
        """Read back an array stored by :meth:`put_array`, checksum verified (writable). Local."""
        return array_from_buffer(name, self._read_whole(name))

    def put_file(self, name: str, path: str | os.PathLike, checksum: str | None = None) -> ObjectInfo:
        """Stream the file at ``path`` into ``name`` in chunks. Local."""
        with open(path, "rb", buffering=0) as src, self.writer(name, checksum) as w:
            copy_stream(src, w.write)
        return w.result

    def get_file(self, name: str, dest: str | os.PathLike) -> ObjectInfo:
        """Stream ``name`` into the file ``dest`` (atomically: temporary name, then rename) and
        verify the checksum before the rename; a mismatch leaves ``dest`` untouched. Local."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            with self.open(name) as src, open(tmp, "wb") as out:
                info = src.info
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

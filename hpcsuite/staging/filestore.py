"""Objects as plain files: the ``tmpfs`` backend (node-local ``/dev/shm``) and the ``cephfs`` backend
(a CephFS mount) share this store.

Layout under the store's root (mode 0700)::

    data/<name>          the object's bytes, a plain file (programs may open it: :meth:`FileStore.path`)
    meta/<name>.json     {"size": ..., "algorithm": ..., "checksum": ...}: the commit record
                         (records of the first form, {"size": ..., "sha256": ...}, are still read)

A writer streams into a hidden temporary beside the final file (``os.write`` straight from the
caller's buffer, checksummed on the way), renames it into place, then writes the commit record
(itself by temporary name and rename). An object exists once its record exists. Reads take one
``read`` per object into the result (``get_bytes``) or per 4 MiB into the array's memory
(``get_array``), checksummed as they arrive; ``get_file`` maps the object's file (no copy into
Python) and checksums and writes from the mapping.
"""
from __future__ import annotations

import itertools
import secrets
import json
import os
from pathlib import Path

from .checksum import hasher
from .store import (CHUNK, ChecksumError, ObjectInfo, StagingError, Store, Writer, check_name, check_read,
                    info_from_record, mapped_windows, record_of, verifier, write_all)

__all__ = ["FileStore", "TmpfsStore", "default_tmpfs_root"]


def default_tmpfs_root() -> Path:
    """``/dev/shm/hpcsuite-store-<uid>-<job or 'local'>``: private to the user and the SLURM job."""
    job = os.environ.get("SLURM_JOB_ID")
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
    return base / f"hpcsuite-store-{os.getuid()}-{'job' + job if job else 'local'}"


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_SEQ = itertools.count()     # temporaries: <pid>-<n> is unique among live processes; O_EXCL and a
                             # retry step over one left behind by a dead process with the same pid


def _tmp_beside(path: str) -> str:
    """A hidden temporary name in the folder of ``path`` (unique to this process and call)."""
    folder, base = path.rsplit("/", 1)
    return f"{folder}/.{base}.tmp-{os.getpid()}-{next(_SEQ)}"


class _FileWriter(Writer):
    piece = 256 << 10         # os.write 256 KiB, then checksum it while it is in the core's cache

    def __init__(self, store: "FileStore", name: str, algorithm: str):
        super().__init__(name, algorithm)
        self.store = store
        self.final = store._dpath(name)
        self.tmp, self.fd = store._create_beside(self.final)

    def _write(self, mv):
        write_all(self.fd, mv)

    def _commit(self, info):
        try:
            if self.store.fsync:
                os.fsync(self.fd)
        finally:
            os.close(self.fd)
        os.replace(self.tmp, self.final)
        self.store._record(info)

    def _abort(self):
        os.close(self.fd)
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass


class FileStore(Store):
    """A store of plain files below ``root``. Local.

    Parameters
    ----------
    root : path-like
        The store's folder (created 0700 if missing).
    fsync : bool
        ``fsync`` every object before it becomes visible (a stand-in for durable central storage
        in benchmarks; off for RAM).
    backend : str
        The name reported in messages (``tmpfs`` or ``cephfs``).
    checksum : str, optional
        Checksum algorithm of new objects (``xxh3-128``, ``sha256``, ``crc32``; default: the
        fastest available, :func:`hpcsuite.staging.checksum.default_algorithm`).
    """

    posix = True

    def __init__(self, root, fsync: bool = False, backend: str = "file", checksum: str | None = None):
        self.root = Path(root)
        self.fsync = fsync
        self.backend = backend
        self.checksum = self._algorithm(checksum)
        for sub in ("", "data", "meta"):
            (self.root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._droot, self._mroot = str(self.root / "data"), str(self.root / "meta")
        self._folders: set[str] = set()          # folders this client made or found (fewer mkdirs)

    def __repr__(self):
        return f"{type(self).__name__}({str(self.root)!r})"

    def path(self, name: str) -> Path:
        """The file holding object ``name`` (a program may write it in place, then :meth:`commit_path`)."""
        return Path(self._dpath(check_name(name)))

    def _dpath(self, name: str) -> str:
        return f"{self._droot}/{name}"

    def _meta(self, name: str) -> str:
        return f"{self._mroot}/{name}.json"

    def _create_beside(self, path: str) -> tuple[str, int]:
        """A new hidden temporary file beside ``path``, opened for writing: ``(its path, fd)``;
        its folder is made (0700) the first time it is needed."""
        folder = path.rsplit("/", 1)[0]
        if folder not in self._folders:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            self._folders.add(folder)
        for attempt in range(8):
            tmp = _tmp_beside(path)
            try:
                return tmp, os.open(tmp, _CREATE, 0o600)
            except FileNotFoundError:            # the folder went away since: make it again
                os.makedirs(folder, mode=0o700, exist_ok=True)
            except FileExistsError:              # left behind by a dead process: the next name
                pass
        raise StagingError(f"cannot create a temporary file beside {path}")

    def _record(self, info: ObjectInfo) -> None:
        m = self._meta(info.name)
        tmp, fd = self._create_beside(m)
        try:
            write_all(fd, memoryview(json.dumps(record_of(info)).encode()))
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, m)

    def commit_path(self, name: str, checksum: str | None = None) -> ObjectInfo:
        """Register the file at :meth:`path` ``(name)``, written in place by a program (for instance a
        parallel HDF5 file), as object ``name``: checksum it (from a mapping of the file, no copy)
        and write its commit record. Local."""
        p = self.path(name)
        alg = self._algorithm(checksum)
        h = hasher(alg)
        with open(p, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            for mv in mapped_windows(f.fileno(), size):
                h.update(mv)
            if self.fsync:
                os.fsync(f.fileno())
        info = ObjectInfo(name, size, h.hexdigest(), alg)
        self._record(info)
        return info

    def _writer(self, name, algorithm):
        return _FileWriter(self, name, algorithm)

    def info(self, name):
        try:
            fd = os.open(self._meta(check_name(name)), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                raw = b"".join(iter(lambda: os.read(fd, 1 << 16), b""))
            finally:
                os.close(fd)
            meta = json.loads(raw)
        except FileNotFoundError:
            raise StagingError(f"no object {name!r} in the {self.backend} store at {self.root}") from None
        except ValueError as exc:
            raise StagingError(f"object {name!r}: unreadable commit record in {self.root}: {exc}") from None
        return info_from_record(name, meta)

    def _data(self, info: ObjectInfo, verify: bool):
        """The object's data file, opened unbuffered, its size checked against the record."""
        f = self._open(info)
        if verify and os.fstat(f.fileno()).st_size != info.size:
            size = os.fstat(f.fileno()).st_size
            f.close()
            raise ChecksumError(f"object {info.name!r}: its file holds {size} bytes, stored size is {info.size}")
        return f

    def get_bytes(self, name, verify=True):
        info = self.info(name)
        h = verifier(info) if verify else None
        with self._data(info, verify) as f:
            data = f.readall()                      # one read into the result (sized by fstat)
        if h is not None:
            h.update(data)                          # (the bytes are still in the cache)
            check_read(info, h, len(data))
        return data

    def _read_whole(self, name, verify=True):
        info = self.info(name)
        h = verifier(info) if verify else None
        buf = bytearray(info.size)
        mv = memoryview(buf)
        got = 0
        with self._data(info, verify) as f:
            while got < info.size:                  # 4 MiB at a time, checksummed while hot
                n = f.readinto(mv[got:got + CHUNK])
                if not n:
                    break
                if h is not None:
                    h.update(mv[got:got + n])
                got += n
        if h is not None:
            check_read(info, h, got)
        return buf

    def get_file(self, name, dest):
        """As :meth:`Store.get_file`, from a mapping of the object's file: each byte is read once
        by the checksum and copied once, by the kernel, into ``dest``. Local."""
        info = self.info(name)
        h = verifier(info)
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            with self._data(info, True) as f:
                fd = os.open(tmp, _CREATE, 0o666)
                try:
                    for mv in mapped_windows(f.fileno(), info.size):
                        h.update(mv)
                        write_all(fd, mv)
                finally:
                    os.close(fd)
            check_read(info, h, info.size)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
        return info

    def _open(self, info):
        try:
            return open(self._dpath(info.name), "rb", buffering=0)
        except FileNotFoundError:
            raise StagingError(f"object {info.name!r}: its data file is missing from {self.root}") from None

    def list(self, prefix=""):
        base = self.root / "meta"
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            for f in filenames:
                if f.endswith(".json") and not f.startswith("."):
                    n = f[:-5] if rel == "." else f"{rel}/{f[:-5]}"
                    if n.startswith(prefix):
                        out.append(n)
        return sorted(out)

    def delete(self, name):
        for p in (self._meta(check_name(name)), self._dpath(name)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


class TmpfsStore(FileStore):
    """The ``tmpfs`` backend: files in node-local RAM (``/dev/shm``) or a given folder. Local."""

    def __init__(self, root=None, fsync: bool = False, checksum: str | None = None):
        super().__init__(root or default_tmpfs_root(), fsync=fsync, backend="tmpfs", checksum=checksum)

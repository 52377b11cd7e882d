"""Objects as plain files: the ``tmpfs`` backend (node-local ``/dev/shm``) and the ``cephfs`` backend
(a CephFS mount) share this store.

Layout under the store's root (mode 0700)::

    data/<name>          the object's bytes, a plain file (programs may open it: :meth:`FileStore.path`)
    meta/<name>.json     {"size": ..., "sha256": ...}: the commit record

A writer streams into a hidden temporary beside the final file, renames it into place, then writes
the commit record (itself by temporary name and rename). An object exists once its record exists.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from .store import CHUNK, ObjectInfo, StagingError, Store, Writer, check_name, copy_stream

__all__ = ["FileStore", "TmpfsStore", "default_tmpfs_root"]


def default_tmpfs_root() -> Path:
    """``/dev/shm/hpcsuite-store-<uid>-<job or 'local'>``: private to the user and the SLURM job."""
    job = os.environ.get("SLURM_JOB_ID")
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
    return base / f"hpcsuite-store-{os.getuid()}-{'job' + job if job else 'local'}"


def _atomic_write_text(path: Path, text: str, fsync: bool) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    with open(tmp, "w") as f:
        f.write(text)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


class _FileWriter(Writer):
    def __init__(self, store: "FileStore", name: str):
        super().__init__(name)
        self.store = store
        self.final = store.path(name)
        self.final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.tmp = self.final.with_name(f".{self.final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        self.f = open(self.tmp, "wb", buffering=0)

    def _write(self, mv):
        self.f.write(mv)

    def _commit(self, info):
        if self.store.fsync:
            os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.final)
        self.store._record(info)

    def _abort(self):
        self.f.close()
        self.tmp.unlink(missing_ok=True)


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
    """

    posix = True

    def __init__(self, root, fsync: bool = False, backend: str = "file"):
        self.root = Path(root)
        self.fsync = fsync
        self.backend = backend
        for sub in ("", "data", "meta"):
            (self.root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)

    def __repr__(self):
        return f"{type(self).__name__}({str(self.root)!r})"

    def path(self, name: str) -> Path:
        """The file holding object ``name`` (a program may write it in place, then :meth:`commit_path`)."""
        return self.root / "data" / check_name(name)

    def _meta(self, name: str) -> Path:
        return self.root / "meta" / f"{name}.json"

    def _record(self, info: ObjectInfo) -> None:
        m = self._meta(info.name)
        m.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _atomic_write_text(m, json.dumps({"size": info.size, "sha256": info.sha256}), self.fsync)

    def commit_path(self, name: str) -> ObjectInfo:
        """Register the file at :meth:`path` ``(name)``, written in place by a program (for instance a
        parallel HDF5 file), as object ``name``: checksum it and write its commit record. Local."""
        p = self.path(name)
        h, size = hashlib.sha256(), 0
        with open(p, "rb", buffering=0) as f:
            size = copy_stream(f, h.update, CHUNK)
            if self.fsync:
                os.fsync(f.fileno())
        info = ObjectInfo(name, size, h.hexdigest())
        self._record(info)
        return info

    def _writer(self, name):
        return _FileWriter(self, name)

    def info(self, name):
        try:
            meta = json.loads(self._meta(check_name(name)).read_text())
        except FileNotFoundError:
            raise StagingError(f"no object {name!r} in the {self.backend} store at {self.root}") from None
        return ObjectInfo(name, int(meta["size"]), meta["sha256"])

    def _open(self, info):
        try:
            return open(self.path(info.name), "rb", buffering=0)
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
        self._meta(check_name(name)).unlink(missing_ok=True)
        self.path(name).unlink(missing_ok=True)


class TmpfsStore(FileStore):
    """The ``tmpfs`` backend: files in node-local RAM (``/dev/shm``) or a given folder. Local."""

    def __init__(self, root=None, fsync: bool = False):
        super().__init__(root or default_tmpfs_root(), fsync=fsync, backend="tmpfs")

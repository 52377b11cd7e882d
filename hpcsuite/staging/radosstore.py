"""The ``rados`` backend: objects in a Ceph pool through librados (Debian's ``python3-rados``).

A stored object is a *head* (namespace ``meta``, named like the object: JSON with size, SHA-256,
generation and chunk count) and its data cut into 4 MiB RADOS objects (namespace ``data``, named
``<name>@<generation>/<k>``). Writers stream chunks with several asynchronous writes in flight, then
write the head in one ``write_full`` (atomic in RADOS): that is the commit. The previous
generation's chunks are removed after the commit. Readers prefetch chunks asynchronously.

Client timeouts (``rados_osd_op_timeout``, ``rados_mon_op_timeout``) make an operation on a dead
OSD or monitor fail with :class:`StagingError` after ``timeout`` seconds instead of hanging.
"""
from __future__ import annotations

import io
import json
import secrets
from collections import deque

from .store import CHUNK, ObjectInfo, StagingError, Store, Writer, check_name

__all__ = ["RadosStore", "rados_client", "RADOS_HINT"]

#: how to get Ceph's Python binding, which is no PyPI package
RADOS_HINT = ("install Ceph's Python binding (Debian/Ubuntu: python3-rados) and make it visible to this "
              "Python (a venv made with --system-site-packages, or a link to it as scripts/setup.sh makes)")

INFLIGHT = 8          # asynchronous chunk operations in flight per stream


def rados_client(conffile, timeout: float = 15.0, name: str = "client.admin"):
    """A connected ``rados.Rados`` with operation timeouts of ``timeout`` seconds. Local.
    Without Ceph's Python binding: :class:`~hpcsuite.runtime.InputError` saying how to get it."""
    from hpcsuite.runtime import optional
    rados = optional.require("rados", "the Ceph staging backends", hint=RADOS_HINT)
    t = str(max(1, int(round(timeout))))
    conf = {"rados_osd_op_timeout": t, "rados_mon_op_timeout": t, "client_mount_timeout": t,
            "log_to_stderr": "false", "err_to_stderr": "false", "log_file": "", "admin_socket": ""}
    cluster = rados.Rados(conffile=str(conffile), name=name, conf=conf)
    try:
        cluster.connect(timeout=int(t))
    except rados.Error as exc:
        cluster.shutdown()
        raise StagingError(f"rados: cannot connect to the Ceph cluster of {conffile} within {t} s: "
                           f"{exc}; is it up (hpcsuite stage status)?") from None
    return cluster


def _err(what: str, exc) -> StagingError:
    import errno
    code = getattr(exc, "errno", None)
    code = abs(code) if isinstance(code, int) else None
    hint = (" (timed out: an OSD or the monitor is down or unreachable; see hpcsuite stage status)"
            if code == errno.ETIMEDOUT or "timed out" in str(exc).lower() else "")
    return StagingError(f"rados: {what}: {exc}{hint}")


def _check(comp, what: str) -> int:
    comp.wait_for_complete_and_cb()     # the callback (which holds read data) has run as well
    rv = comp.get_return_value()
    if rv < 0:
        import os
        raise _err(what, OSError(-rv, os.strerror(-rv)))
    return rv


class _RadosWriter(Writer):
    def __init__(self, store: "RadosStore", name: str):
        super().__init__(name)
        self.store = store
        self.gen = secrets.token_hex(6)
        self.buf = bytearray()
        self.nchunks = 0
        self.pending: deque = deque()

    def _chunk_name(self, k):
        return f"{self.name}@{self.gen}/{k}"

    def _flush(self, data: bytes):
        while len(self.pending) >= INFLIGHT:
            _check(self.pending.popleft(), f"writing {self.name!r}")
        try:
            self.pending.append(self.store.data.aio_write_full(self._chunk_name(self.nchunks), data))
        except Exception as exc:  # noqa: BLE001 - rados.Error and friends
            raise _err(f"writing {self.name!r}", exc) from None
        self.nchunks += 1

    def _write(self, mv):
        self.buf += mv
        while len(self.buf) >= CHUNK:
            self._flush(bytes(self.buf[:CHUNK]))
            del self.buf[:CHUNK]

    def _commit(self, info):
        if self.buf or self.nchunks == 0:
            self._flush(bytes(self.buf))
            self.buf = bytearray()
        while self.pending:
            _check(self.pending.popleft(), f"writing {self.name!r}")
        old = self.store._head(self.name, missing_ok=True)
        head = {"size": info.size, "sha256": info.sha256, "gen": self.gen, "n": self.nchunks, "chunk": CHUNK}
        try:
            self.store.meta.write_full(self.name, json.dumps(head).encode())
        except Exception as exc:  # noqa: BLE001
            raise _err(f"committing {self.name!r}", exc) from None
        if old and old["gen"] != self.gen:
            self.store._remove_chunks(self.name, old)

    def _abort(self):
        try:
            while self.pending:
                self.pending.popleft().wait_for_complete()
            self.store._remove_chunks(self.name, {"gen": self.gen, "n": self.nchunks})
        except Exception:  # noqa: BLE001 - best effort: the cluster may be the reason we abort
            pass


class _RadosReader(io.RawIOBase):
    def __init__(self, store: "RadosStore", name: str, head: dict):
        self.store, self.name, self.head = store, name, head
        self.next_fetch = 0
        self.pending: deque = deque()
        self.cur = memoryview(b"")

    def readable(self):
        return True

    def _fetch(self):
        while self.next_fetch < self.head["n"] and len(self.pending) < INFLIGHT:
            box = {}

            def done(comp, data, box=box):
                box["data"] = data
            obj = f"{self.name}@{self.head['gen']}/{self.next_fetch}"
            try:
                comp = self.store.data.aio_read(obj, self.head["chunk"], 0, done)
            except Exception as exc:  # noqa: BLE001
                raise _err(f"reading {self.name!r}", exc) from None
            self.pending.append((comp, box))
            self.next_fetch += 1

    def readinto(self, b):
        if not len(self.cur):
            self._fetch()
            if not self.pending:
                return 0
            comp, box = self.pending.popleft()
            rv = _check(comp, f"reading {self.name!r}")
            # the binding hands over the whole buffer when 0 bytes were read: trust rv
            self.cur = memoryview(box.get("data") or b"")[:rv]
            self._fetch()
            if not len(self.cur):
                return 0
        n = min(len(b), len(self.cur))
        memoryview(b).cast("B")[:n] = self.cur[:n]
        self.cur = self.cur[n:]
        return n

    def close(self):
        for comp, _ in self.pending:
            comp.wait_for_complete()
        self.pending.clear()
        super().close()


class RadosStore(Store):
    """Objects in the RADOS pool ``pool`` of the cluster described by ``conffile``. Local.

    Parameters
    ----------
    conffile : path-like
        The deployment's ``ceph.conf`` (its ``[client]`` section names the admin keyring).
    pool : str
        The pool (created by ``hpcsuite stage up``).
    timeout : float
        Seconds before an operation on an unreachable OSD or monitor fails.
    """

    backend = "rados"

    def __init__(self, conffile, pool: str = "hpcsuite", timeout: float = 15.0):
        self.cluster = rados_client(conffile, timeout)       # (first: says how to get rados if missing)
        import rados
        try:
            self.meta = self.cluster.open_ioctx(pool)
            self.data = self.cluster.open_ioctx(pool)
        except rados.Error as exc:
            self.cluster.shutdown()
            raise _err(f"opening pool {pool!r}", exc) from None
        self.meta.set_namespace("meta")
        self.data.set_namespace("data")
        self.pool = pool

    def close(self):
        if self.cluster is not None:
            self.meta.close()
            self.data.close()
            self.cluster.shutdown()
            self.cluster = None

    def _head(self, name, missing_ok=False):
        import rados
        try:
            return json.loads(self.meta.read(name, 1 << 16))
        except rados.ObjectNotFound:
            if missing_ok:
                return None
            raise StagingError(f"no object {name!r} in the rados pool {self.pool!r}") from None
        except rados.Error as exc:
            raise _err(f"reading the head of {name!r}", exc) from None

    def _remove_chunks(self, name, head):
        comps = [self.data.aio_remove(f"{name}@{head['gen']}/{k}") for k in range(head["n"])]
        for c in comps:
            c.wait_for_complete()      # ENOENT is fine: removal is idempotent

    def _writer(self, name):
        return _RadosWriter(self, name)

    def info(self, name):
        h = self._head(check_name(name))
        return ObjectInfo(name, h["size"], h["sha256"])

    def _open(self, info):
        return _RadosReader(self, info.name, self._head(info.name))

    def list(self, prefix=""):
        import rados
        try:
            return sorted(o.key for o in self.meta.list_objects() if o.key.startswith(prefix))
        except rados.Error as exc:
            raise _err("listing objects", exc) from None

    def delete(self, name):
        import rados
        head = self._head(check_name(name), missing_ok=True)
        if head is None:
            return
        try:
            self.meta.remove_object(name)
        except rados.ObjectNotFound:
            pass
        except rados.Error as exc:
            raise _err(f"deleting {name!r}", exc) from None
        self._remove_chunks(name, head)

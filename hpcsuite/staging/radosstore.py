"""The ``rados`` backend: objects in a Ceph pool through librados (Debian's ``python3-rados``).

A stored object is a *head* (namespace ``meta``, named like the object) and, beyond its first
4 MiB, further chunks (namespace ``data``, named ``<name>@<generation>/<k>``, ``k = 1, 2, ...``).
The head holds the first chunk's bytes followed by the commit record (JSON: size, checksum and its
algorithm, generation, chunk count) and a footer that says where the record starts; the record is
also the head's extended attribute ``hpcsuite`` (so :meth:`RadosStore.info` reads ~100 bytes). So
an object of up to 4 MiB is one RADOS operation to write and one to read, as in ``rados bench``.

Writers stream chunks ``1, 2, ...`` with several asynchronous writes in flight, then write the head
in one compound operation (``write_full`` + record + xattr: atomic in RADOS): that is the commit.
The head is created exclusively; only when the object already exists is the old record read, the
head rewritten, and the previous generation's chunks removed after the commit. Readers read the
head (first chunk and record at once) and prefetch the other chunks asynchronously, checksumming
each as it arrives. :meth:`RadosStore.put_many` and :meth:`RadosStore.iter_many` keep up to
``inflight`` objects in flight.

Heads of the first form (namespace ``meta`` holding only a JSON record with ``sha256``, every chunk
``0 .. n-1`` in namespace ``data``) are still read.

Client timeouts (``rados_osd_op_timeout``, ``rados_mon_op_timeout``) make an operation on a dead
OSD or monitor fail with :class:`StagingError` after ``timeout`` seconds instead of hanging.
"""
from __future__ import annotations

import errno
import io
import json
import os
import secrets
from collections import deque
from collections.abc import Mapping

from .store import (CHUNK, ObjectInfo, StagingError, Store, Writer, check_name, check_read,
                    info_from_record, record_of, verifier)
from .checksum import hasher

__all__ = ["RadosStore", "rados_client", "RADOS_HINT", "INFLIGHT"]

#: how to get Ceph's Python binding, which is no PyPI package
RADOS_HINT = ("install Ceph's Python binding (Debian/Ubuntu: python3-rados) and make it visible to this "
              "Python (a venv made with --system-site-packages, or a link to it as scripts/setup.sh makes)")

INFLIGHT = 16         # asynchronous operations in flight per stream or batch (rados bench's default)
XATTR = "hpcsuite"    # the head's extended attribute holding the commit record
MAGIC = b"HPCSREC2"   # footer of a head: <first chunk><record JSON><record length: u32 LE><MAGIC>
_FOOT = 4 + len(MAGIC)
_HEAD_READ = CHUNK + (1 << 16)     # one read of a head: the first chunk and a record of < 64 KiB


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
    code = getattr(exc, "errno", None)
    code = abs(code) if isinstance(code, int) else None
    hint = (" (timed out: an OSD or the monitor is down or unreachable; see hpcsuite stage status)"
            if code == errno.ETIMEDOUT or "timed out" in str(exc).lower() else "")
    return StagingError(f"rados: {what}: {exc}{hint}")


def _rv(comp) -> int:
    comp.wait_for_complete_and_cb()     # the callback (which holds read data) has run as well
    return comp.get_return_value()


def _check(comp, what: str) -> int:
    rv = _rv(comp)
    if rv < 0:
        raise _err(what, OSError(-rv, os.strerror(-rv)))
    return rv


def _as_bytes(mv) -> bytes:
    """``bytes`` for the binding (which takes nothing else): the object itself when it is one."""
    return mv if type(mv) is bytes else bytes(mv)


def _parse_head(name: str, raw: bytes):
    """``(record, first chunk as a memoryview or None)`` of a head's bytes (None: a first-form head,
    whose chunks are all in the data namespace)."""
    try:
        if len(raw) >= _FOOT and raw[-len(MAGIC):] == MAGIC:
            rlen = int.from_bytes(raw[-_FOOT:-len(MAGIC)], "little")
            end = len(raw) - _FOOT - rlen
            rec = json.loads(raw[end:len(raw) - _FOOT])
            return rec, memoryview(raw)[:end]
        return json.loads(raw), None
    except (ValueError, UnicodeDecodeError):
        raise StagingError(f"rados: the head of {name!r} is damaged (no readable commit record)") from None


def _first_chunk(rec: dict) -> int:
    """Number of the first chunk kept in the data namespace: 1 (the head holds chunk 0) or 0."""
    return 1 if rec.get("v", 1) >= 2 else 0


class _Window:
    """At most ``depth`` asynchronous operations in flight, retired in the order they were issued;
    ``then(rv)`` runs when one completes (a negative ``rv`` raises unless ``then`` takes it)."""

    def __init__(self, depth: int):
        self.depth, self.q = depth, deque()

    def room(self) -> None:
        """Retire operations until one more may be issued."""
        while len(self.q) >= self.depth:
            self.retire()

    def add(self, comp, what: str, then=None, keep=None) -> None:
        """Track an issued operation (``keep``: a write op to release when it completes)."""
        self.q.append((comp, what, then, keep))

    def retire(self) -> None:
        comp, what, then, keep = self.q.popleft()
        rv = _rv(comp)
        if keep is not None:
            keep.release()
        if then is not None:
            then(rv)
        elif rv < 0:
            raise _err(what, OSError(-rv, os.strerror(-rv)))

    def drain(self) -> None:
        while self.q:
            self.retire()

    def cancel(self) -> None:
        """Wait for what is in flight, ignoring its results (after an error)."""
        while self.q:
            comp, _, _, keep = self.q.popleft()
            comp.wait_for_complete()
            if keep is not None:
                keep.release()


class _RadosWriter(Writer):
    def __init__(self, store: "RadosStore", name: str, algorithm: str):
        super().__init__(name, algorithm)
        self.store = store
        self.gen = secrets.token_hex(6)
        self.buf = bytearray()
        self.head: bytes | None = None      # chunk 0, written with the record at the commit
        self.nchunks = 0
        self.window = _Window(store.inflight)

    def _chunk(self, data: bytes):
        if self.nchunks == 0:
            self.head = data
        else:
            obj = f"{self.name}@{self.gen}/{self.nchunks}"
            self.window.room()
            try:
                comp = self.store.data.aio_write_full(obj, data)
            except Exception as exc:  # noqa: BLE001 - rados.Error and friends
                raise _err(f"writing {self.name!r}", exc) from None
            self.window.add(comp, f"writing {self.name!r}")
        self.nchunks += 1

    def _write(self, mv):
        i = 0
        if self.buf:                                   # top up a partial chunk first
            i = min(CHUNK - len(self.buf), mv.nbytes)
            self.buf += mv[:i]
            if len(self.buf) == CHUNK:
                self._chunk(bytes(self.buf))
                self.buf = bytearray()
        while mv.nbytes - i >= CHUNK:                  # whole chunks: one copy, into the request
            self._chunk(bytes(mv[i:i + CHUNK]))
            i += CHUNK
        if i < mv.nbytes:
            self.buf += mv[i:]

    def _commit(self, info):
        if self.buf or self.nchunks == 0:
            self._chunk(bytes(self.buf))
            self.buf = bytearray()
        self.window.drain()
        self.store._commit_head(info, self.gen, self.nchunks, self.head or b"")

    def _abort(self):
        try:
            self.window.cancel()
            self.store._remove_chunks(self.name, {"v": 2, "gen": self.gen, "n": self.nchunks})
        except Exception:  # noqa: BLE001 - best effort: the cluster may be the reason we abort
            pass


class _RadosReader(io.RawIOBase):
    """The object's chunks in order: the head's first chunk, then the others, prefetched."""

    def __init__(self, store: "RadosStore", info: ObjectInfo, rec: dict, first, verify: bool):
        self.store, self.info, self.rec = store, info, rec
        self.name = info.name
        self.next_fetch = _first_chunk(rec)
        self.pending: deque = deque()
        self.cur = memoryview(b"")
        self.hash = verifier(info) if verify else None
        self.seen = 0
        if first is not None:
            self._take(first)

    def readable(self):
        return True

    def _take(self, mv):
        if self.hash is not None:
            self.hash.update(mv)
        self.seen += mv.nbytes
        self.cur = mv

    def _fetch(self):
        while self.next_fetch < self.rec["n"] and len(self.pending) < self.store.inflight:
            box = {}

            def done(comp, data, box=box):
                box["data"] = data
            obj = f"{self.name}@{self.rec['gen']}/{self.next_fetch}"
            try:
                comp = self.store.data.aio_read(obj, self.rec.get("chunk", CHUNK), 0, done)
            except Exception as exc:  # noqa: BLE001
                raise _err(f"reading {self.name!r}", exc) from None
            self.pending.append((comp, box))
            self.next_fetch += 1

    def _next(self) -> bool:
        """Make the next chunk current; False at the end (where the checksum is checked)."""
        self._fetch()
        if not self.pending:
            if self.hash is not None:
                check_read(self.info, self.hash, self.seen)
                self.hash = None
            return False
        comp, box = self.pending.popleft()
        rv = _check(comp, f"reading {self.name!r}")
        # the binding hands over the whole buffer when 0 bytes were read: trust rv
        self._take(memoryview(box.get("data") or b"")[:rv])
        self._fetch()
        return True

    def readinto(self, b):
        while not len(self.cur):
            if not self._next():
                return 0
        n = min(len(b), len(self.cur))
        memoryview(b).cast("B")[:n] = self.cur[:n]
        self.cur = self.cur[n:]
        return n

    def read(self, size=-1):
        """Up to ``size`` bytes (the rest when negative): one copy out of the chunk buffers."""
        if size is None or size < 0:
            return b"".join(self.pieces())
        while not len(self.cur):
            if not self._next():
                return b""
        out = bytes(self.cur[:size])
        self.cur = self.cur[len(out):]
        return out

    def pieces(self):
        """The remaining bytes as a list of memoryviews (no copy), verified at the end."""
        out = []
        while True:
            if len(self.cur):
                out.append(self.cur)
                self.cur = memoryview(b"")
            if not self._next():
                return out

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
    checksum : str, optional
        Checksum algorithm of new objects (default: the fastest available).
    inflight : int
        Asynchronous operations in flight per stream and per batch (default 16).
    """

    backend = "rados"

    def __init__(self, conffile, pool: str = "hpcsuite", timeout: float = 15.0,
                 checksum: str | None = None, inflight: int = INFLIGHT):
        from hpcsuite.runtime import InputError
        self.checksum = self._algorithm(checksum)
        if not isinstance(inflight, int) or inflight < 1:
            raise InputError(f"inflight must be a positive integer, got {inflight!r}")
        self.inflight = inflight
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

    # ------------------------------------------------------------------ records and heads
    def _missing(self, name):
        return StagingError(f"no object {name!r} in the rados pool {self.pool!r}")

    def _record(self, name, missing_ok=False) -> dict | None:
        """The commit record of ``name`` from its head's xattr (a first-form head: its content)."""
        import rados
        try:
            return json.loads(self.meta.get_xattr(name, XATTR))
        except rados.ObjectNotFound:
            if missing_ok:
                return None
            raise self._missing(name) from None
        except rados.NoData:
            pass                                  # a first-form head: the record is its content
        except rados.Error as exc:
            raise _err(f"reading the record of {name!r}", exc) from None
        except ValueError:
            raise StagingError(f"rados: the record of {name!r} is damaged") from None
        raw = self._read_head(name, missing_ok)
        return None if raw is None else _parse_head(name, raw)[0]

    def _read_head(self, name, missing_ok=False) -> bytes | None:
        import rados
        try:
            return self.meta.read(name, _HEAD_READ)
        except rados.ObjectNotFound:
            if missing_ok:
                return None
            raise self._missing(name) from None
        except rados.Error as exc:
            raise _err(f"reading the head of {name!r}", exc) from None

    def _head_op(self, info: ObjectInfo, gen: str, n: int, first: bytes, exclusive: bool):
        """The compound write that commits an object: its head (first chunk, record, footer) and
        the record as xattr; with ``exclusive``, it fails (EEXIST) if the head exists."""
        import rados
        rec = json.dumps({"v": 2, **record_of(info), "gen": gen, "n": n, "chunk": CHUNK}).encode()
        op = self.meta.create_write_op()
        if exclusive:
            op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
        op.write_full(first)
        op.write(rec + len(rec).to_bytes(4, "little") + MAGIC, len(first))
        op.set_xattr(XATTR, rec)
        return op

    def _commit_head(self, info: ObjectInfo, gen: str, n: int, first: bytes) -> None:
        """Commit synchronously: exclusive create; if the object exists, replace it and remove the
        chunks of the generation it replaced."""
        import rados
        op = self._head_op(info, gen, n, first, exclusive=True)
        try:
            self.meta.operate_write_op(op, info.name)
            return
        except rados.ObjectExists:
            pass
        except rados.Error as exc:
            raise _err(f"committing {info.name!r}", exc) from None
        finally:
            op.release()
        self._replace_head(info, gen, n, first)

    def _replace_head(self, info: ObjectInfo, gen: str, n: int, first: bytes) -> None:
        old = self._record(info.name, missing_ok=True)
        op = self._head_op(info, gen, n, first, exclusive=False)
        try:
            self.meta.operate_write_op(op, info.name)
        except Exception as exc:  # noqa: BLE001
            raise _err(f"committing {info.name!r}", exc) from None
        finally:
            op.release()
        if old and old.get("gen") != gen:
            self._remove_chunks(info.name, old)

    def _remove_chunks(self, name, rec):
        comps = [self.data.aio_remove(f"{name}@{rec['gen']}/{k}")
                 for k in range(_first_chunk(rec), rec["n"])]
        for c in comps:
            c.wait_for_complete()      # ENOENT is fine: removal is idempotent

    # ------------------------------------------------------------------ the Store primitives
    def _writer(self, name, algorithm):
        return _RadosWriter(self, name, algorithm)

    def info(self, name):
        return info_from_record(name, self._record(check_name(name)))

    def _reader(self, name, verify):
        rec, first = _parse_head(name, self._read_head(check_name(name)))
        return _RadosReader(self, info_from_record(name, rec), rec, first, verify)

    def open(self, name, verify=True):
        """A reader of the whole object; one read fetches its head (first chunk and record). Local."""
        return self._reader(name, verify)

    def _open(self, info):
        return self._reader(info.name, False)

    def get_bytes(self, name, verify=True):
        with self._reader(name, verify) as r:
            parts = r.pieces()
        return b"".join(parts)                  # the one copy: out of the head and chunk buffers

    def _read_whole(self, name, verify=True):
        with self._reader(name, verify) as r:
            buf = bytearray(r.info.size)
            off = 0
            for p in r.pieces():
                buf[off:off + len(p)] = p
                off += len(p)
        return buf

    def put_bytes(self, name, data, checksum=None):
        """Store ``data``; up to 4 MiB it is one compound write of the head (no chunk). Local."""
        mv = memoryview(data).cast("B")
        if mv.nbytes > CHUNK:
            return super().put_bytes(name, data, checksum)
        alg = self._algorithm(checksum)
        check_name(name)
        h = hasher(alg)
        h.update(mv)
        info = ObjectInfo(name, mv.nbytes, h.hexdigest(), alg)
        self._commit_head(info, secrets.token_hex(6), 1, _as_bytes(data if type(data) is bytes else mv))
        return info

    def put_many(self, items, checksum=None):
        """Store many objects with up to ``inflight`` of them in flight: each of up to 4 MiB is
        one asynchronous compound write; larger ones stream with their own chunks in flight. Local."""
        alg = self._algorithm(checksum)
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        for n, _ in pairs:
            check_name(n)
        out: list = [None] * len(pairs)
        again = []                                       # objects that existed: replaced afterwards
        window = _Window(self.inflight)
        try:
            for i, (name, data) in enumerate(pairs):
                mv = memoryview(data).cast("B")
                if mv.nbytes > CHUNK:
                    out[i] = super().put_bytes(name, data, alg)
                    continue
                h = hasher(alg)
                h.update(mv)
                info = out[i] = ObjectInfo(name, mv.nbytes, h.hexdigest(), alg)
                first, gen = _as_bytes(data if type(data) is bytes else mv), secrets.token_hex(6)
                window.room()
                op = self._head_op(info, gen, 1, first, exclusive=True)

                def then(rv, info=info, gen=gen, first=first):
                    if rv == -errno.EEXIST:
                        again.append((info, gen, first))
                    elif rv < 0:
                        raise _err(f"committing {info.name!r}", OSError(-rv, os.strerror(-rv)))
                try:
                    comp = self.meta.operate_aio_write_op(op, name)
                except Exception as exc:  # noqa: BLE001
                    op.release()
                    raise _err(f"writing {name!r}", exc) from None
                window.add(comp, f"writing {name!r}", then, keep=op)
            window.drain()
        except BaseException:
            window.cancel()
            raise
        for info, gen, first in again:
            self._replace_head(info, gen, 1, first)
        return out

    def iter_many(self, names, verify=True):
        """``(name, bytes)`` of many objects with up to ``inflight`` head reads in flight (an object
        of up to 4 MiB is its head: one read), each verified as it arrives. Local."""
        names = [check_name(n) for n in names]
        pending: deque = deque()

        def issue(name):
            box = {}

            def done(comp, data, box=box):
                box["data"] = data
            try:
                pending.append((name, self.meta.aio_read(name, _HEAD_READ, 0, done), box))
            except Exception as exc:  # noqa: BLE001
                raise _err(f"reading {name!r}", exc) from None
        nxt = 0
        try:
            while nxt < len(names) or pending:
                while nxt < len(names) and len(pending) < self.inflight:
                    issue(names[nxt])
                    nxt += 1
                name, comp, box = pending.popleft()
                rv = _rv(comp)
                if rv == -errno.ENOENT:
                    raise self._missing(name)
                if rv < 0:
                    raise _err(f"reading {name!r}", OSError(-rv, os.strerror(-rv)))
                rec, first = _parse_head(name, box["data"] if rv > 0 else b"")  # (trimmed to rv)
                if first is None or rec["n"] > 1:
                    yield name, self.get_bytes(name, verify)     # further chunks: on its own
                    continue
                if verify:
                    info = info_from_record(name, rec)
                    h = verifier(info)
                    h.update(first)
                    check_read(info, h, first.nbytes)
                yield name, bytes(first)                    # (the head's trailing record cut off)
        finally:
            for _, comp, _ in pending:
                comp.wait_for_complete()

    def list(self, prefix=""):
        import rados
        try:
            return sorted(o.key for o in self.meta.list_objects() if o.key.startswith(prefix))
        except rados.Error as exc:
            raise _err("listing objects", exc) from None

    def delete(self, name):
        import rados
        rec = self._record(check_name(name), missing_ok=True)
        if rec is None:
            return
        try:
            self.meta.remove_object(name)
        except rados.ObjectNotFound:
            pass
        except rados.Error as exc:
            raise _err(f"deleting {name!r}", exc) from None
        self._remove_chunks(name, rec)

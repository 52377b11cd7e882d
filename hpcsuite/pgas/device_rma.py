"""Device-resident one-sided access to GPU distributed arrays: CUDA IPC on a node, device RMA windows
across nodes, host staging as the fallback.

A :class:`DeviceWindow` over a ``DistArray(device="gpu")`` reads and writes any unit's *device*
block from any rank, one-sided, with device arrays in and out (the array's own ``a[idx]`` reads the
host mirror between ``update_host`` / ``update_device``). The path to each unit is chosen once, when
the window is made (collective), and reported in ``DeviceWindow.path``:

``"ipc"``
    units on this node: each rank exports its device block once with a CUDA IPC handle
    (``cudaIpcGetMemHandle``), the handles are exchanged over the node communicator and opened by
    every peer (``cudaIpcOpenMemHandle``); a get or put is then a device-to-device copy between the
    peer's memory and the caller's (a CuPy array over the opened pointer), no MPI call and no host
    copy. The block is first moved to an allocation of its own (``cupy.cuda.Memory``: an IPC handle
    names a whole ``cudaMalloc`` allocation, and the memory pool's share one).
``"mpi"``
    with a CUDA-aware MPI (:func:`hpcsuite.runtime.gpu_aware_mpi`): an MPI-3 window over the device
    block (``MPI_Win_create`` on the device pointer, ``MPI_Win_lock_all`` for the window's life),
    ``MPI_Get`` / ``MPI_Put`` with device origin buffers and the same derived target datatypes as
    the host path, completion by ``MPI_Win_flush``. Used for units on other nodes (``"ipc+mpi"``
    when both kinds of unit exist), or for every unit when forced.
``"host"``
    host staging, which works with any MPI: reads and writes go through the array's host mirror
    (its MPI windows); :meth:`DeviceWindow.fence` copies device blocks to the mirror and merges the
    elements that were put back into the device blocks. Used when either device path is missing
    for some unit (the whole window then stages, so all ranks see one coherent copy).

Choice: ``path=`` or ``$HPCSUITE_PGAS_DEVICE_PATH`` = ``auto`` (default) | ``ipc`` | ``mpi`` | ``host``.
``auto`` takes IPC on the node when every rank can open its peers' handles, and device RMA across
nodes when the MPI is CUDA-aware and not Open MPI, else host staging. Why not device RMA on the node
as well, and not Open MPI's: MPICH supports GPU buffers in RMA through its active-message fallback
(pmodels/mpich#4848) and GPU RDMA (#6647), but its native UCX window over GPU memory was still an
open pull request (#6795) when this was written; Open MPI documents CUDA-aware point-to-point and
blocking collectives only, and its osc/ucx windows over device memory have failed ("remote memory
is unreachable", openucx/ucx#5386; ``MPI_Win_create`` with CUDA, open-mpi/ompi#11255). Forcing
``mpi`` uses device RMA for every unit (also on the node); forcing ``ipc`` fails on every rank when
a handle cannot be opened. For tests, ``$HPCSUITE_PGAS_DEVICE_NODE_SIZE=k`` treats each run of ``k``
ranks of a node as a node of its own (IPC within, device RMA or staging between).

Copies: :func:`pull_copy` copies one GPU array into another of a different layout by one-sided
device gets (each rank pulls its own destination block through a window over the source), where
that applies (destination blocks that are one progression per dimension; one node or a
CUDA-aware MPI); :func:`copy` falls back to :func:`hpcsuite.pgas.copy` (``Alltoallw``).

Synchronisation, as for the host arrays (DASH's model): a blocking :meth:`~DeviceWindow.get` /
:meth:`~DeviceWindow.put` returns with the data transferred (the copy stream synchronised, or
``MPI_Win_flush``); ``*_async`` + ``wait()`` complete later; :meth:`~DeviceWindow.flush` completes
everything this rank issued (local); :meth:`~DeviceWindow.fence` (collective) completes everything,
makes every rank's local device writes (``a.local[...] = ...``) visible to the others (device
synchronise, and on the host path the mirror update) and waits for every rank. A
:class:`~hpcsuite.pgas.sync.Mutex` orders gets and puts between two ranks as it does on the host.
On the host path values put become visible to other ranks' gets at once (the mirror), and to the
owner's ``a.local`` at the next fence; do not write the same elements both locally and by put in
one epoch (a race on every path).

Examples
--------
With ``mpiexec -n 2`` on one node::

    >>> a = pgas.zeros(8, device="gpu")
    >>> w = DeviceWindow(a)                   # collective; w.path == "ipc"
    >>> w.put(slice(0, 8, 2), cupy.ones(4))  # any rank, one-sided, device to device
    >>> w.fence()                             # collective
    >>> w.get(slice(0, 4))                    # a CuPy array: [1, 0, 1, 0] on every rank
    >>> w.free()                              # collective
"""
from __future__ import annotations

import atexit
import collections
import importlib
import logging
import os
import weakref
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ..runtime import gpu_aware_mpi
from .access import index_key, normalize, plan, storage_offsets, target_datatype
from .array import DistArray
from .memory import node_comm

__all__ = ["DeviceWindow", "copy", "pull_copy", "PATHS", "ENV", "live_windows"]

#: the values of ``path=`` / ``$HPCSUITE_PGAS_DEVICE_PATH``
PATHS = ("auto", "ipc", "mpi", "host")
#: the environment variable that forces a path
ENV = "HPCSUITE_PGAS_DEVICE_PATH"

_log = logging.getLogger("hpcsuite.pgas.device_rma")

# windows not yet freed (creation is collective: every rank lists the same ones, in order)
_live: "list[DeviceWindow]" = []


def live_windows() -> int:
    """Number of :class:`DeviceWindow` objects made and not yet freed on this rank. Local."""
    return len(_live)


def _requested(path) -> str:
    """The requested path (argument, else environment, else ``auto``), validated. Local."""
    if path is None:
        path = os.environ.get(ENV, "auto") or "auto"
        where = f"${ENV}"
    else:
        where = "path"
    if path not in PATHS:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, PATHS))}, got {path!r}")
    return path


def _rma_on_device_trusted() -> bool:
    """Whether ``auto`` may use MPI RMA on device memory: a CUDA-aware MPI that is not Open MPI
    (see the module notes). Local."""
    return gpu_aware_mpi() and not MPI.Get_library_version().startswith("Open MPI")


def _pretend_node_size() -> int:
    """``$HPCSUITE_PGAS_DEVICE_NODE_SIZE``: for tests, treat each run of this many ranks of a
    node as a node of its own (so IPC within, device RMA or staging between, on one machine);
    0 or unset: the real nodes. Local."""
    raw = os.environ.get("HPCSUITE_PGAS_DEVICE_NODE_SIZE", "0") or "0"
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"$HPCSUITE_PGAS_DEVICE_NODE_SIZE must be a non-negative integer, got {raw!r}")
    return n


def _cuda(xp, name: str):
    """``xp.cuda.<name>`` as a module (``runtime``, ``memory``): CuPy's, or the stand-in's."""
    return importlib.import_module(f"{xp.__name__}.cuda.{name}")


def _padded_shape(array, unit: int) -> tuple[int, ...]:
    return tuple(array.padded_storage_shape(unit))


@dataclass
class _Plan:
    """A planned access: per piece (route, unit, result index, storage index or MPI target)."""

    full_shape: tuple
    out_shape: tuple
    direct: list = field(default_factory=list)      # (unit, result index, storage index)
    spans: list = field(default_factory=list)       # (unit, result byte offset, storage byte offset, bytes)
    remote: list = field(default_factory=list)      # (unit, result index, piece shape, target)
    targets: list = field(default_factory=list)
    types: list = field(default_factory=list)

    def free(self) -> None:
        for t in self.types:
            t.Free()
        self.types = []


class DeviceWindow:
    """One-sided access to the device blocks of a GPU :class:`~hpcsuite.pgas.DistArray`. Making one
    is collective over the array's team.

    Parameters
    ----------
    array : DistArray
        An array with ``device="gpu"``.
    path : {"auto", "ipc", "mpi", "host"}, optional
        Force a path (see the module notes); default ``$HPCSUITE_PGAS_DEVICE_PATH``, else ``auto``.
        Must be the same on every rank.

    Attributes
    ----------
    path : str
        The path taken, the same on every rank: ``"local"`` (one unit), ``"ipc"``, ``"mpi"``,
        ``"ipc+mpi"`` (IPC on the node, device RMA across nodes) or ``"host"``.
    routes : dict
        Team rank -> how this rank reaches that unit's block: ``"local"``, ``"ipc"``, ``"mpi"`` or
        ``"host"``.

    Raises
    ------
    ValueError
        On every rank, before any communication, for an array that is not on the GPU or an unknown
        path; ``mpi`` forced without a CUDA-aware MPI.
    RuntimeError
        On every rank, when ``ipc`` is forced and some rank cannot open a peer's handle.

    Notes
    -----
    The window moves the array's device block to memory of its own once (for IPC); views of
    ``a.local`` taken before the window was made keep the old memory: take them afterwards.
    """

    def __init__(self, array: DistArray, path: str | None = None):
        if not isinstance(array, DistArray):
            raise ValueError(f"DeviceWindow needs a DistArray, got {type(array).__name__}")
        array.check_alive()
        if not array.device.is_gpu:
            raise ValueError("DeviceWindow needs a DistArray with device='gpu', got one on the host")
        want = _requested(path)
        split = _pretend_node_size()
        if want == "mpi" and not gpu_aware_mpi():
            raise ValueError("DeviceWindow path 'mpi' needs a CUDA-aware MPI "
                             "(hpcsuite.runtime.gpu_aware_mpi() is False; see $HPCSUITE_GPU_AWARE_MPI)")
        self.array, self.team = array, array.team
        self.xp = array.device.xp
        self._mpitype = array.mpitype
        self._halo = array.halo_width if any(array.halo_width) else None
        self._plans: "collections.OrderedDict" = collections.OrderedDict()
        self._opened: dict[int, bytes] = {}        # unit -> the IPC handle opened for it
        self._views: dict[int, object] = {}        # unit -> device array over its padded block
        self._bases: dict[int, int] = {}           # unit -> its opened block's address (IPC)
        self._rt = _cuda(self.xp, "runtime")
        self._win = None
        self._snapshot = None                      # host path: the block as of the last fence
        self._freed = False
        team, me = self.team, self.team.rank
        nc = node_comm(team)
        if split:                                  # tests: nodes of `split` ranks on one machine
            nc = nc.Split(nc.Get_rank() // split, nc.Get_rank())
        node_units = nc.allgather(me)
        on_one_node = team.comm.allreduce(len(node_units) == team.size, op=MPI.LAND)
        remote = "mpi" if want == "mpi" or (want in ("auto", "ipc") and _rma_on_device_trusted()) else "host"
        remote = "mpi" if team.comm.allreduce(remote == "mpi", op=MPI.LAND) else "host"
        node = {"auto": "ipc", "ipc": "ipc", "mpi": "mpi", "host": "host"}[want]
        if not on_one_node and remote == "host":
            node = "host"                          # one coherent copy: everything staged
        if node == "ipc":
            ok = self._open_ipc(nc, node_units)
            if not team.comm.allreduce(ok, op=MPI.LAND):
                self._close_ipc()
                if want == "ipc":
                    raise RuntimeError("DeviceWindow path 'ipc': some rank could not open its node "
                                       "peers' CUDA IPC handles (see its log)")
                node = remote if not on_one_node else ("mpi" if _rma_on_device_trusted() else "host")
                if node == "host":
                    remote = "host"
        if node == "host":
            remote = "host"
        routes = {}
        for u in range(team.size):
            if u == me:
                routes[u] = "host" if node == "host" else "local"
            elif u in node_units:
                routes[u] = node
            else:
                routes[u] = remote
        self.routes = routes
        # the kinds of route any rank takes to another unit, agreed: "ipc", "ipc+mpi", ...
        kinds = set().union(*team.comm.allgather({r for u, r in routes.items() if u != me}))
        if not kinds:
            self.path = "host" if node == "host" else "local"
        else:
            self.path = "+".join(k for k in ("ipc", "mpi", "host") if k in kinds)
        self._views[me] = None                     # the array's own block, read when used
        if split:
            nc.Free()
        if node == "mpi" or remote == "mpi" and not on_one_node:
            self._make_device_window()
        if node == "host":
            self._host_fence()
        else:
            array.device.synchronize()
            team.barrier()
        if me == 0:
            _log.info("DeviceWindow over %s: path %s", array, self.path)
        _live.append(self)

    # ------------------------------------------------------------------ setting up the paths
    def _open_ipc(self, nc, node_units) -> bool:
        """Export this rank's block, exchange handles on the node, open the peers'. Collective on
        the node; returns whether every peer's handle opened here."""
        xp, array = self.xp, self.array
        rt, mem = _cuda(xp, "runtime"), _cuda(xp, "memory")
        me = self.team.rank
        handle, err = None, None
        try:
            storage = array.device_storage
            nbytes = int(storage.nbytes)
            if nbytes:
                own = _EXPORTED.get(id(array))
                if own is None or own[1] is not storage:
                    block = mem.Memory(nbytes)        # an allocation of its own: one IPC handle
                    fresh = xp.ndarray(storage.shape, storage.dtype, mem.MemoryPointer(block, 0))
                    fresh[...] = storage
                    array.device_storage = fresh
                    storage = fresh
                    if id(array) not in _EXPORTED:
                        weakref.finalize(array, _EXPORTED.pop, id(array), None)
                    _EXPORTED[id(array)] = (block, storage)
                handle = bytes(rt.ipcGetMemHandle(storage.data.ptr))
        except Exception as exc:  # noqa: BLE001 - a device without IPC: fall back, agreed below
            err = f"{type(exc).__name__}: {exc}"
        entries = nc.allgather((me, handle, err))
        ok = all(e[2] is None for e in entries)
        if not ok:
            return False
        for unit, h, _ in entries:
            if unit == me:
                continue
            shape = _padded_shape(array, unit)
            if h is None:
                self._views[unit] = xp.empty(shape, dtype=array.dtype)
                continue
            try:
                base = _open_handle(rt, h)
            except Exception as exc:  # noqa: BLE001 - no peer access between these GPUs
                _log.warning("DeviceWindow: cannot open unit %d's CUDA IPC handle (%s: %s)", unit,
                             type(exc).__name__, exc)
                return False
            self._opened[unit] = h
            self._bases[unit] = base
            nbytes = int(np.prod(shape, dtype=np.int64)) * array.dtype.itemsize
            # the current device's memory to CuPy: the opened pointer is valid here (UVA, peer
            # access enabled lazily by cudaIpcOpenMemHandle)
            peer = mem.UnownedMemory(base, nbytes, self, xp.cuda.Device().id)
            self._views[unit] = xp.ndarray(shape, array.dtype, mem.MemoryPointer(peer, 0))
        return True

    def _close_ipc(self) -> None:
        if not self._opened:
            return
        rt = _cuda(self.xp, "runtime")
        for unit in self._opened:
            self._views.pop(unit, None)
            self._bases.pop(unit, None)
        self.xp.cuda.runtime.deviceSynchronize()
        opened, self._opened = self._opened, {}
        for h in opened.values():
            _close_handle(rt, h)

    def _make_device_window(self) -> None:
        """An MPI window over the device block (CUDA-aware MPI). Collective."""
        storage = self.array.device_storage
        self.array.device.synchronize()
        self._win = MPI.Win.Create(storage if storage.size else None, self.array.dtype.itemsize,
                                   comm=self.team.comm)
        self._win.Lock_all(MPI.MODE_NOCHECK)

    # ------------------------------------------------------------------ planning
    def _storage(self, unit: int):
        v = self._views.get(unit)
        return self.array.device_storage if v is None else v

    def _plan(self, idx) -> _Plan:
        key = index_key(idx)
        p = self._plans.get(key) if key is not None else None
        if p is not None:
            self._plans.move_to_end(key)
            return p
        array = self.array
        pattern = array.pattern
        sels, out_shape = normalize(idx, array.shape)
        p = _Plan(tuple(s.count for s in sels), out_shape)
        for pc in plan(pattern, sels):
            route = self.routes[pc.unit]
            ushape = _padded_shape(array, pc.unit)
            ridx = pc.result_index(None)
            if route in ("local", "ipc"):
                if pattern.tiled:
                    didx = storage_offsets(pc, pattern, ushape)
                else:
                    li = pc.local_index()
                    w = array.halo_width
                    if any(w):
                        li = tuple(slice(s.start + x, s.stop + x, s.step) for s, x in zip(li, w)) \
                            if isinstance(li[0], slice) else tuple(a + x for a, x in zip(li, w))
                    didx = li
                rs = _span(ridx, p.full_shape)
                ds = None if pattern.tiled or rs is None else _span(didx, ushape)
                if ds is not None:                  # contiguous on both sides: one memcpy
                    isz = array.dtype.itemsize
                    p.spans.append((pc.unit, rs[0] * isz, ds[0] * isz, rs[1] * isz))
                else:
                    p.direct.append((pc.unit, self._on_device(ridx), self._on_device(didx)))
            else:                                   # "mpi" ("host" never gets here)
                dtype, disp, count = target_datatype(pc, pattern, ushape, self._mpitype, self._halo)
                if dtype is not self._mpitype:
                    p.types.append(dtype)
                p.remote.append((pc.unit, self._on_device(ridx), pc.shape, (disp, count, dtype)))
                if pc.unit not in p.targets:
                    p.targets.append(pc.unit)
        if key is not None:
            self._plans[key] = p
            if len(self._plans) > 64:
                _, old = self._plans.popitem(last=False)
                old.free()
        return p

    def _on_device(self, index):
        """An index with its integer arrays copied to the device once (CuPy gathers with device
        index arrays; the plan is cached)."""
        if isinstance(index, np.ndarray):
            return self.xp.asarray(index)
        if isinstance(index, tuple) and any(isinstance(i, np.ndarray) for i in index):
            return tuple(self.xp.asarray(i) if isinstance(i, np.ndarray) else i for i in index)
        return index

    def _alive(self) -> None:
        if self._freed:
            raise RuntimeError("this DeviceWindow was freed; it can no longer be used")
        self.array.check_alive()

    # ------------------------------------------------------------------ get
    def _ptr(self, unit: int) -> int:
        """The device address of ``unit``'s padded block as seen from here (IPC or own)."""
        base = self._bases.get(unit)
        return self.array.device_storage.data.ptr if base is None else base

    def _memcpy(self, dst: int, src: int, nbytes: int) -> None:
        stream = self.xp.cuda.get_current_stream()
        self._rt.memcpyAsync(dst, src, nbytes, self._rt.memcpyDeviceToDevice, getattr(stream, "ptr", 0))

    def _start_get(self, p: _Plan, result) -> list:
        tiled = self.array.pattern.tiled
        if p.spans:
            base = result.data.ptr
            for unit, r_off, s_off, nbytes in p.spans:
                self._memcpy(base + r_off, self._ptr(unit) + s_off, nbytes)
        for unit, ridx, didx in p.direct:
            src = self._storage(unit)
            result[ridx] = (src.reshape(-1) if tiled else src)[didx]
        deferred = []
        if p.remote:
            whole = len(p.remote) == 1 and not p.direct and not p.spans
            for unit, ridx, shape, target in p.remote:
                buf = result if whole else self.xp.empty(shape, dtype=self.array.dtype)
                self._win.Get(buf, unit, target)
                if not whole:
                    deferred.append((ridx, buf))
        return deferred

    def get(self, idx, out=None):
        """Read the elements ``idx`` (ints, slices with steps, ``...``) of any units' device blocks.
        One-sided.

        Returns a device array of the selection's shape (0-d for one element), or fills ``out`` (a
        C-contiguous device array of that shape and the array's dtype) and returns it. Raises
        ``IndexError`` naming the index and the global shape when out of range.
        """
        self._alive()
        if self.path == "host":
            value = self.array.get(idx)
            res = self.xp.asarray(value)
            if out is not None:
                out[...] = res
                return out
            return res
        p = self._plan(idx)
        if out is None:
            result = self.xp.empty(p.full_shape, dtype=self.array.dtype)
        else:
            if tuple(out.shape) != p.out_shape or out.dtype != self.array.dtype or not out.flags.c_contiguous:
                raise ValueError(f"out must be a C-contiguous {self.array.dtype} device array of shape "
                                 f"{p.out_shape}, got {out.dtype} {tuple(out.shape)}")
            result = out if p.full_shape == p.out_shape else out.reshape(p.full_shape)
        deferred = self._start_get(p, result)
        self._complete(p.targets, deferred, result)
        if out is not None:
            return out
        return result if p.full_shape == p.out_shape else result.reshape(p.out_shape)

    def get_async(self, idx) -> "DeviceGetHandle":
        """Start reading ``idx``; ``handle.wait()`` returns the device array. One-sided."""
        self._alive()
        if self.path == "host":
            return DeviceGetHandle(self, None, None, [], [], self.array.get_async(idx))
        p = self._plan(idx)
        result = self.xp.empty(p.full_shape, dtype=self.array.dtype)
        deferred = self._start_get(p, result)
        return DeviceGetHandle(self, result, p.out_shape, list(p.targets), deferred, None)

    def _complete(self, targets, deferred, result) -> None:
        for t in targets:
            self._win.Flush(t)
        for ridx, buf in deferred:
            result[ridx] = buf
        self.array.device.synchronize()            # the device copies are done

    # ------------------------------------------------------------------ put
    def _value(self, p_out_shape, full_shape, value):
        """``value`` as a C-contiguous device array of the selection's full shape."""
        xp = self.xp
        if isinstance(value, xp.ndarray) and value.dtype == self.array.dtype and \
                tuple(value.shape) == p_out_shape and value.flags.c_contiguous:
            return value if p_out_shape == full_shape else value.reshape(full_shape)   # the common case
        try:
            v = xp.asarray(value, dtype=self.array.dtype)
            v = xp.broadcast_to(v, p_out_shape)
        except ValueError:
            shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
            raise ValueError(f"cannot assign a value of shape {shape} to a selection of shape "
                             f"{p_out_shape}") from None
        return xp.ascontiguousarray(v).reshape(full_shape)

    def _start_put(self, p: _Plan, value) -> list:
        v = self._value(p.out_shape, p.full_shape, value)
        tiled = self.array.pattern.tiled
        if p.spans:
            base = v.data.ptr
            for unit, r_off, s_off, nbytes in p.spans:
                self._memcpy(self._ptr(unit) + s_off, base + r_off, nbytes)
        for unit, ridx, didx in p.direct:
            dst = self._storage(unit)
            if tiled:
                dst.reshape(-1)[didx] = v[ridx]
            else:
                dst[didx] = v[ridx]
        keep = [(unit, self.xp.ascontiguousarray(v[ridx]), target) for unit, ridx, _, target in p.remote]
        if keep:
            self.array.device.synchronize()        # MPI reads the sources from device memory
            for unit, src, target in keep:
                self._win.Put(src, unit, target)
        return keep

    def put(self, idx, value) -> None:
        """Write ``value`` (a device array, or anything ``xp.asarray`` takes, broadcast to the
        selection) into ``idx`` of the owners' device blocks. One-sided; returns when the data is
        in the owners' memory."""
        self._alive()
        if self.path == "host":
            self.array[idx] = self.array.device.to_host(value) if hasattr(value, "shape") else value
            return
        p = self._plan(idx)
        keep = self._start_put(p, value)
        for t in p.targets:
            self._win.Flush(t)
        del keep
        self.array.device.synchronize()

    def put_async(self, idx, value) -> "DevicePutHandle":
        """Start writing ``value`` into ``idx``; ``handle.wait()`` completes it at the owners.
        One-sided."""
        self._alive()
        if self.path == "host":
            v = self.array.device.to_host(value) if hasattr(value, "shape") else value
            return DevicePutHandle(self, [], [], self.array.put_async(idx, v))
        p = self._plan(idx)
        keep = self._start_put(p, value)
        return DevicePutHandle(self, keep, list(p.targets), None)

    __getitem__ = get
    __setitem__ = put

    # ------------------------------------------------------------------ completion
    def flush(self) -> None:
        """Complete every outstanding get and put this rank issued through the window. Local."""
        self._alive()
        if self._win is not None:
            self._win.Flush_all()
        if self.path == "host":
            self.array.flush()
        self.array.device.synchronize()

    def fence(self) -> None:
        """End an epoch: complete every rank's operations, make each rank's local device writes
        visible to the others (and, on the host path, merge the elements put into the device
        blocks), and wait for every rank. Collective."""
        self._alive()
        if self.path == "host":
            self._host_fence()
            return
        if self._win is not None:
            self._win.Flush_all()
        self.array.device.synchronize()
        self.team.barrier()
        if self._win is not None:
            self._win.Sync()

    sync = fence

    def _host_fence(self) -> None:
        """Host path: puts are complete in the mirrors; elements that changed there since the last
        fence go into the device block, then the device block (with the local writes) becomes the
        mirror and the new snapshot. Collective."""
        a = self.array
        a.flush()
        a.team.barrier()                            # every put has landed in the mirrors
        dev = a.device.to_host(a.device_storage)   # the device block with this epoch's local writes
        if self._snapshot is not None:
            a.update_device()                       # (sync) device <- mirror, to read the mirror
            mirror = a.device.to_host(a.device_storage)
            changed = _changed(mirror, self._snapshot)
            if changed.any():
                dev[changed] = mirror[changed]
            a.device_storage[...] = a.device.asarray(dev)
        a.update_host()                             # mirror <- merged device block, barrier
        self._snapshot = dev

    # ------------------------------------------------------------------ lifetime
    def free(self) -> None:
        """Close the peers' IPC mappings and free the device window. Collective; idempotent. The
        array keeps its device block (and stays usable)."""
        if self._freed:
            return
        self._freed = True
        if self in _live:
            _live.remove(self)
        self.array.device.synchronize()
        self.team.barrier()                         # nobody still reads or writes a peer's block
        for p in self._plans.values():
            p.free()
        self._plans.clear()
        self._close_ipc()
        self._views.clear()
        if self._win is not None:
            self._win.Unlock_all()
            self._win.Free()
            self._win = None
        self._snapshot = None

    def __enter__(self) -> "DeviceWindow":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"DeviceWindow(path={self.path!r}, {'freed' if self._freed else self.array!r})"


# id(array) -> (its exported allocation, the device array over it), so that a second window over
# the same array exports the same memory again (the device array is compared by identity); the
# entry goes with the array object. (Not a WeakKeyDictionary: it compares keys with ==, which is
# elementwise and collective on DistArrays.)
_EXPORTED: dict = {}


# CUDA IPC handles opened in this process: handle -> [base pointer, number of windows using it].
# A handle is opened once per process and closed with its last window (CUDA does not promise that
# opening the same handle twice in one context works).
_OPEN_HANDLES: dict = {}


def _open_handle(rt, h: bytes) -> int:
    entry = _OPEN_HANDLES.get(h)
    if entry is None:
        entry = _OPEN_HANDLES[h] = [rt.ipcOpenMemHandle(h), 0]
    entry[1] += 1
    return entry[0]


def _close_handle(rt, h: bytes) -> None:
    entry = _OPEN_HANDLES[h]
    entry[1] -= 1
    if entry[1] == 0:
        del _OPEN_HANDLES[h]
        rt.ipcCloseMemHandle(entry[0])


def _span(index, shape) -> tuple[int, int] | None:
    """``(element offset, count)`` when the slices ``index`` select one contiguous run of a
    C-ordered array of ``shape`` (else ``None``)."""
    if not isinstance(index, tuple) or len(index) != len(shape) or \
            not all(isinstance(i, slice) for i in index):
        return None
    ranges = [range(*sl.indices(n)) for sl, n in zip(index, shape)]
    counts = [len(r) for r in ranges]
    if 0 in counts:
        return None
    k = next((d for d, c in enumerate(counts) if c > 1), len(shape))
    if k < len(shape) and ranges[k].step != 1:
        return None
    for d in range(k + 1, len(shape)):
        if counts[d] != shape[d] or (counts[d] > 1 and ranges[d].step != 1):
            return None
    offset, stride = 0, 1
    for d in reversed(range(len(shape))):
        offset += ranges[d][0] * stride if counts[d] else 0
        stride *= shape[d]
    return offset, int(np.prod(counts, dtype=np.int64))


def _changed(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Element mask of bitwise differences (NaN-safe)."""
    n, o = np.ascontiguousarray(new), np.ascontiguousarray(old)
    if n.dtype.itemsize == 0 or n.size == 0:
        return np.zeros(n.shape, dtype=bool)
    bn = n.view(np.uint8).reshape(n.shape + (n.dtype.itemsize,))
    bo = o.view(np.uint8).reshape(o.shape + (o.dtype.itemsize,))
    return np.any(bn != bo, axis=-1)


class DeviceGetHandle:
    """An outstanding :meth:`DeviceWindow.get_async`; :meth:`wait` returns the device array."""

    def __init__(self, win, result, out_shape, targets, deferred, host_handle):
        self._win, self._result, self._shape = win, result, out_shape
        self._targets, self._deferred, self._host = targets, deferred, host_handle
        self._done = None

    def wait(self):
        """Complete the transfer and return the data (a device array). Local."""
        if self._done is None:
            if self._host is not None:
                self._done = self._win.xp.asarray(self._host.wait())
            else:
                self._win._complete(self._targets, self._deferred, self._result)
                self._done = self._result.reshape(self._shape)
        return self._done


class DevicePutHandle:
    """An outstanding :meth:`DeviceWindow.put_async`; :meth:`wait` completes it at the owners."""

    def __init__(self, win, keep, targets, host_handle):
        self._win, self._keep, self._targets, self._host = win, keep, targets, host_handle
        self._done = False

    def wait(self) -> None:
        """Complete the transfer at the owners. Local."""
        if not self._done:
            if self._host is not None:
                self._host.wait()
            else:
                for t in self._targets:
                    self._win._win.Flush(t)
                self._win.array.device.synchronize()
            self._keep = None
            self._done = True


# ---------------------------------------------------------------------- copy
def _as_slice(indices: np.ndarray) -> slice | None:
    """``indices`` (increasing) as a slice, when they are an arithmetic progression."""
    n = len(indices)
    if n == 0:
        return slice(0, 0)
    if n == 1:
        return slice(int(indices[0]), int(indices[0]) + 1)
    d = np.diff(indices)
    if d[0] > 0 and np.all(d == d[0]):
        return slice(int(indices[0]), int(indices[-1]) + 1, int(d[0]))
    return None


def _check_pair(src, dst, window) -> None:
    for name, a in (("src", src), ("dst", dst)):
        if not isinstance(a, DistArray) or not a.device.is_gpu:
            raise ValueError(f"copy: {name} must be a DistArray with device='gpu'")
        a.check_alive()
    if src.shape != dst.shape:
        raise ValueError(f"copy: shapes differ: source {src.shape}, destination {dst.shape}")
    if src.team.comm.Compare(dst.team.comm) not in (MPI.IDENT, MPI.CONGRUENT):
        raise ValueError("copy: source and destination must live on the same team")
    if window is not None and window.array is not src:
        raise ValueError("copy: window must be a DeviceWindow over src")


def pull_copy(src: DistArray, dst: DistArray, window: DeviceWindow | None = None) -> str | None:
    """Copy ``src`` into ``dst`` (GPU arrays, same global shape) by one-sided device gets, when
    that applies: each rank pulls its own block of ``dst`` from ``src``'s device blocks through a
    :class:`DeviceWindow` (CUDA IPC on the node, device RMA across nodes). Collective.

    Applies when ``dst``'s owned indices are one progression per dimension (BLOCKED, CYCLIC, NONE;
    any ``src`` pattern, tiles too) and, without ``window``, when the whole team is on one node or
    the MPI takes device buffers (else a window would only stage through the host). Returns the
    window's path, or ``None`` (on every rank, nothing copied) when it does not apply: then
    :func:`hpcsuite.pgas.copy` is the way (an ``Alltoallw``). ``window`` reuses an open window over
    ``src``.
    """
    _check_pair(src, dst, window)
    sl = None if dst.pattern.tiled else [_as_slice(np.asarray(i)) for i in dst.local_indices]
    fits = sl is not None and all(s is not None for s in sl)
    if window is None:
        fits = fits and (_requested(None) != "host") and (
            node_comm(src.team).Get_size() == src.team.size or gpu_aware_mpi())
    if not src.team.comm.allreduce(fits, op=MPI.LAND):
        return None
    w = window if window is not None else DeviceWindow(src)
    try:
        w.fence()                                   # every rank's source writes are visible
        if dst.local.size:
            block = w.get(tuple(sl))
            dst.local[...] = block if block.dtype == dst.dtype else block.astype(dst.dtype)
        w.fence()                                   # nobody changes a source still being read
        return w.path
    finally:
        if window is None:
            w.free()


def copy(src: DistArray, dst: DistArray, window: DeviceWindow | None = None) -> str:
    """Copy every element of GPU array ``src`` into GPU array ``dst`` (same global shape, any two
    patterns). Collective.

    The same layout: a device copy of the local blocks; else :func:`pull_copy` where it applies
    (each rank pulls its destination block one-sidedly from the source's device blocks); else
    :func:`hpcsuite.pgas.copy` (an ``Alltoallw``, on the devices with a CUDA-aware MPI). Returns
    what was taken: ``"same-layout"``, the window's path (``"ipc"``, ``"mpi"``, ...) or
    ``"alltoallw"``, the same on every rank.
    """
    from .redistribute import copy as redistribute_copy
    _check_pair(src, dst, window)
    if src.pattern == dst.pattern and src.pattern.tiled == dst.pattern.tiled:
        redistribute_copy(src, dst)
        return "same-layout"
    taken = pull_copy(src, dst, window)
    if taken is None:
        redistribute_copy(src, dst)
        return "alltoallw"
    return taken


@atexit.register
def _free_at_exit() -> None:
    # windows before the segments (memory.py's handler runs after this one: registered earlier)
    if MPI.Is_finalized():
        return
    for w in list(_live):
        w.free()

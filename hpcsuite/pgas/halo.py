"""Halo (ghost-cell) exchange for distributed arrays with BLOCKED dimensions.

Every unit's local block is stored with ``w[d]`` ghost layers on each side of dimension ``d``.
:meth:`Halo.update` fills them from the neighbouring units: faces only, or faces, edges and corners
(``corners=True``, e.g. for 27-point stencils). All messages of an update are posted at once as
persistent requests, so :meth:`Halo.update_async` overlaps the whole exchange with computation.

Boundaries per dimension: ``"periodic"`` (wrap around), ``"none"`` (ghosts at the global edge are
left as they are) or a number (ghosts at the global edge are set to that value).

GPU arrays pack and unpack on the device. With a CUDA-aware MPI (``runtime.gpu_aware_mpi``) the
packed buffers stay on the device and go to MPI as they are; otherwise they are staged through host
memory (one device-to-host copy per face sent, one host-to-device copy per face received).

:class:`HaloGroup` updates the halos of several arrays together (all messages in flight at once, and
on a GPU the wrap-around copies of all of them in one kernel launch).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from numbers import Real

import numpy as np
from mpi4py import MPI

from ..runtime.comm_hooks import observed
from ..runtime.device import gpu_aware_mpi
from ..runtime.index_copy import ManyCopy, copy_within
from ..runtime.waiting import waitall

__all__ = ["HaloSpec", "Halo", "HaloGroup"]


@dataclass(frozen=True)
class HaloSpec:
    """Ghost widths, boundary conditions and whether corners are exchanged. Local."""

    width: tuple[int, ...]
    boundary: tuple          # per dimension: "periodic" | "none" | float
    corners: bool = False

    @classmethod
    def build(cls, width, boundary, corners, ndim) -> "HaloSpec":
        if isinstance(boundary, (str, Real)) and not isinstance(boundary, bool):
            boundary = (boundary,) * ndim
        boundary = tuple(boundary)
        if len(boundary) != ndim:
            raise ValueError(f"boundary needs {ndim} entries, got {len(boundary)}")
        for b in boundary:
            if not (b in ("periodic", "none") or (isinstance(b, Real) and not isinstance(b, bool))):
                raise ValueError(f"boundary must be 'periodic', 'none' or a number, got {b!r}")
        return cls(tuple(width), tuple(float(b) if isinstance(b, Real) else b for b in boundary), bool(corners))


def _region(side: int, n: int, w: int, ghost: bool) -> tuple[int, int]:
    """(start, size) along one dimension of the padded block for direction ``side``."""
    if side == 0:
        return w, n
    if ghost:
        return (0, w) if side < 0 else (w + n, w)
    return (w, w) if side < 0 else (n, w)


class Halo:
    """The halo of one :class:`~hpcsuite.pgas.DistArray` (get it as ``a.halo``); its updates are
    collective with the neighbours.

    Border regions are packed into contiguous buffers with NumPy (CuPy on GPU) and exchanged with
    persistent requests: measured faster than MPI subarray datatypes with MPICH, whose datatype
    engine packs strided faces more slowly than NumPy's copy. A neighbour that is this unit itself
    (one unit along a periodic dimension) is served by a direct copy, without MPI.
    """

    def __init__(self, array, spec: HaloSpec):
        self.array, self.spec = array, spec
        p = array.pattern
        team = array.team
        nd, w = p.ndim, spec.width
        coords = p.unit_coords(team.rank)
        n = p.local_shape(team.rank)
        dirs = [o for o in itertools.product((-1, 0, 1), repeat=nd) if any(o)]
        if not spec.corners:
            dirs = [o for o in dirs if sum(1 for x in o if x) == 1]
        dirs = [o for o in dirs if all(w[d] > 0 for d in range(nd) if o[d])]
        tag_of = {o: i for i, o in enumerate(itertools.product((-1, 0, 1), repeat=nd))}
        # where packed faces live: on the device when MPI reads device memory, else on the host
        self._on_device = array.device.is_gpu and gpu_aware_mpi()
        xp = array.device.xp if self._on_device else np

        def new_buffer(shape, dtype):
            return xp.empty(shape, dtype=dtype)
        self._fills, self._self_copies, self._exchanges = [], [], []
        sends, recvs = [], []
        for o in dirs:
            nb, fill = [], None
            for d in range(nd):
                c = coords[d] + o[d]
                if 0 <= c < p.grid[d] or not o[d]:
                    nb.append(c)
                    continue
                b = spec.boundary[d]
                if b == "periodic":
                    nb.append(c % p.grid[d])
                else:
                    nb = None
                    fill = b if isinstance(b, float) else None
                    break
            ghost = tuple(slice(s, s + k) for s, k in (_region(o[d], n[d], w[d], True) for d in range(nd)))
            if nb is None:
                if fill is not None:
                    self._fills.append((ghost, fill))
                continue
            inner = tuple(slice(s, s + k) for s, k in (_region(o[d], n[d], w[d], False) for d in range(nd)))
            if any(sl.stop == sl.start for sl in inner):
                continue
            peer = p.unit_of(nb)
            if peer == team.rank:
                # wrapping onto myself: my border on the opposite side fills this ghost region
                opposite = tuple(slice(s, s + k) for s, k in
                                 (_region(-o[d], n[d], w[d], False) for d in range(nd)))
                self._self_copies.append((opposite, ghost))
                continue
            shape = tuple(sl.stop - sl.start for sl in inner)
            sbuf, rbuf = new_buffer(shape, array.dtype), new_buffer(shape, array.dtype)
            self._exchanges.append((inner, ghost, sbuf, rbuf, peer))
            sends.append(team.comm.Send_init(sbuf, peer, tag=tag_of[o]))
            recvs.append(team.comm.Recv_init(rbuf, peer, tag=tag_of[tuple(-x for x in o)]))
        self._requests = recvs + sends
        # on a GPU the wrap-around copies (up to 8 regions in 2-D periodic blocks, 26 in 3-D) are one
        # kernel over precomputed flat indices (runtime.index_copy), not one launch per region:
        # launches are what an update costs on a small grid (ghosts never read ghosts here)
        self._self_index = None
        if array.device.is_gpu and len(self._self_copies) > 1 and array.local_with_halo.flags.c_contiguous:
            xpd, shape = array.device.xp, array.local_with_halo.shape
            flat = xpd.arange(int(np.prod(shape))).reshape(shape)         # built on the device
            self._self_index = (xpd.concatenate([flat[inner].ravel() for inner, _ in self._self_copies]),
                                xpd.concatenate([flat[ghost].ravel() for _, ghost in self._self_copies]))
        peers = [p for *_, p in self._exchanges]
        self._request_peers = peers + peers
        self.messages = len(sends)
        self.nbytes = sum(sbuf.nbytes for _, _, sbuf, _, _ in self._exchanges)
        self._started: list = []
        self._target = None                      # the block being updated
        self._received: set | None = None        # exchanges whose message was started (None: all)
        self._active = False

    def update(self, target=None) -> None:
        """Fill every ghost cell from its neighbour (or the boundary rule). Collective over the
        array's team (point-to-point with the neighbours). ``target``: see :meth:`update_async`."""
        self.update_async(target).wait()

    def update_async(self, target=None, self_copies: bool = True) -> "HaloUpdate":
        """Start the exchange and return a handle; call ``wait()`` before reading ghost cells or
        writing border cells. Collective over the array's team.

        ``target``: update the halo of this C-contiguous array of the block's shape and dtype (on the
        array's device) instead of the array's own block, e.g. a work array of the same layout.
        ``self_copies=False`` leaves the ghosts that wrap around onto this unit to the caller
        (:class:`HaloGroup` copies them for several arrays at once).
        """
        self.array.check_alive()
        if self._active:
            raise RuntimeError("a halo update of this array is already in flight; wait() for it first")
        u = self.array.local_with_halo
        if target is not None:
            if target.shape != u.shape or target.dtype != u.dtype or not target.flags.c_contiguous:
                raise ValueError(f"halo update target must be a C-contiguous {u.dtype} array of shape "
                                 f"{u.shape}, got {target.dtype} {target.shape}")
            u = target
        self._target = u
        dev = self.array.device
        stage = dev.is_gpu and not self._on_device
        for inner, _, sbuf, _, _ in self._exchanges:
            sbuf[...] = dev.to_host(u[inner]) if stage else u[inner]
        if self._on_device and self._exchanges:
            dev.synchronize()                    # the packing kernels are done before MPI reads
        self._active = True
        if self._requests:
            # one communication kernel for the tuner (hpcsuite.tune): a neighbourhood exchange,
            # started here and completed in wait(); it may start the exchanges of only some peers
            self._started = observed(self.array.team, "Halo", self.nbytes, self._start, self._request_peers)
        if not self_copies:
            pass
        elif self._self_index is not None:       # overlaps with the messages in flight
            copy_within(u.reshape(-1), *self._self_index)
        else:
            for inner, ghost in self._self_copies:
                u[ghost] = u[inner]
        return HaloUpdate(self)

    def _start(self, peers=None) -> list:
        """Start the persistent requests exchanging with ``peers`` (all when None); the started
        ones. Ghost regions whose message was not started keep their values (the tuner skipped it)."""
        if peers is None:
            reqs, self._received = self._requests, None
        else:
            live = [j for j, q in enumerate(self._request_peers) if q in peers]
            reqs = [self._requests[j] for j in live]
            self._received = {j for j in live if j < len(self._exchanges)}   # receives come first
        if reqs:
            MPI.Prequest.Startall(reqs)
        return reqs

    def _finish(self) -> None:
        if self._requests:
            observed(self.array.team, "Halo_wait", self.nbytes, waitall, self._started)
            self._started = []
        u = self._target
        xp = self.array.device.xp
        for i, (_, ghost, _, rbuf, _) in enumerate(self._exchanges):
            if self._received is None or i in self._received:
                u[ghost] = xp.asarray(rbuf) if self.array.device.is_gpu and not self._on_device else rbuf
        for region, value in self._fills:
            u[region] = value
        self._active, self._target = False, None

    def free(self) -> None:
        """Release the persistent requests. Collective with the array's free()."""
        if self._active:
            self._finish()
        for r in self._requests:
            r.Free()
        self._requests, self._exchanges = [], []


class HaloGroup:
    """The halos of several distributed arrays (or of work arrays of their layouts), updated
    together. Creating one is local.

    All exchanges are in flight at once (one after the other for members that share an array: its
    message buffers serve one update at a time). On a GPU, the ghost regions that wrap around onto
    this unit (one unit along a periodic dimension) are filled for all members in one kernel launch
    (:class:`~hpcsuite.runtime.index_copy.ManyCopy`) instead of one per member; elsewhere the update
    is that of each member's :class:`Halo`.

    Parameters
    ----------
    arrays : sequence of DistArray
        The arrays whose halo plans are used.
    targets : sequence, optional
        Per array, None (update the array's own block) or a C-contiguous array of its block's shape
        and dtype to update instead (as ``Halo.update(target=)``). Blocks and targets must not move
        while the group is used (the GPU copy keeps their addresses).
    """

    def __init__(self, arrays, targets=None):
        arrays = list(arrays)
        targets = [None] * len(arrays) if targets is None else list(targets)
        if len(targets) != len(arrays):
            raise ValueError(f"HaloGroup: {len(arrays)} arrays but {len(targets)} targets")
        self.members = [(a.halo, t) for a, t in zip(arrays, targets)]
        blocks = [a.local_with_halo if t is None else t for a, t in zip(arrays, targets)]
        for (h, t), b in zip(self.members, blocks):
            u = h.array.local_with_halo
            if t is not None and (t.shape != u.shape or t.dtype != u.dtype or not t.flags.c_contiguous):
                raise ValueError(f"halo update target must be a C-contiguous {u.dtype} array of shape "
                                 f"{u.shape}, got {t.dtype} {t.shape}")
        copies = [j for j, (h, _) in enumerate(self.members) if h._self_index is not None]
        self._many, self._grouped = None, set()
        if len(copies) > 1 and len({blocks[j].dtype for j in copies}) == 1:
            many = ManyCopy([blocks[j].reshape(-1) for j in copies], [self.members[j][0]._self_index for j in copies])
            if many.launches == 1:
                self._many, self._grouped = many, set(copies)
        self.blocks = blocks

    @property
    def halos(self) -> list:
        return [h for h, _ in self.members]

    def update_async(self) -> "HaloGroupUpdate":
        """Start every member's exchange; ``wait()`` on the handle completes them all. Collective over
        the arrays' teams."""
        pending: dict = {}
        for j, (h, t) in enumerate(self.members):
            if id(h) in pending:                 # the same array's plan again: finish its last use
                pending.pop(id(h)).wait()
            pending[id(h)] = h.update_async(t, self_copies=j not in self._grouped)
        if self._many is not None:               # overlaps with the messages in flight
            self._many.run()
        return HaloGroupUpdate(list(pending.values()))

    def update(self) -> None:
        """Fill every ghost cell of every member. Collective over the arrays' teams."""
        self.update_async().wait()


class HaloGroupUpdate:
    """The exchanges of a :class:`HaloGroup` in flight; ``wait()`` completes them."""

    def __init__(self, pending):
        self._pending = pending

    def wait(self) -> None:
        for p in self._pending:
            p.wait()


class HaloUpdate:
    """An exchange in flight; ``wait()`` completes it."""

    def __init__(self, halo: Halo):
        self._halo, self._done = halo, False

    def wait(self) -> None:
        if not self._done:
            self._halo._finish()
            self._done = True

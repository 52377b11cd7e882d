"""``DistArray``: an N-D array distributed over a team, with a global and a local view.

Global view (one-sided, from any rank, without the owners taking part)::

    x = a[3, 10:20]          # a NumPy array, fetched with one MPI_Get per owning unit
    a[0, ::2] = 1.0          # written with one MPI_Put per owning unit
    h = a.get_async(slice(0, 100)); ...; x = h.wait()

Local view (owner computes)::

    a.local *= 2.0           # the owned block, a writable NumPy array (CuPy on device="gpu")
    gi, gj = a.local_indices # global indices of its rows and columns

Elements owned by a unit on the same node are read and written as plain NumPy views of its
shared-memory storage; remote ones through the team window, locked once for the array's lifetime.
Completion: blocking ``a[...]``/``a[...] = v`` return with the data transferred; ``flush()``
completes outstanding asynchronous operations; ``sync()`` (collective) is flush plus barrier.

Examples
--------
With ``mpiexec -n 2``::

    >>> a = pgas.arange(10)                 # BLOCKED: rank 0 owns 0..4, rank 1 owns 5..9
    >>> a.local                              # rank 0: array([0, 1, 2, 3, 4]); rank 1: [5 ... 9]
    >>> a[3:7]                               # every rank: array([3, 4, 5, 6])
"""
from __future__ import annotations

import atexit
import collections
import functools
import math
import sys
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib
from numpy.lib.mixins import NDArrayOperatorsMixin

from ..runtime import Team, get_device
from ..runtime.comm_hooks import observed
from .access import index_key, normalize, plan, storage_offsets, target_datatype
from . import lifetime
from .dist import BLOCKED
from .memory import acquire, node_comm
from .pattern import Pattern

__all__ = ["DistArray", "zeros", "ones", "full", "empty", "arange", "from_numpy", "mpi_type",
           "NUMPY_PROTOCOL"]

#: The handlers behind DistArray's NumPy protocols (``__array_ufunc__``, ``__array_function__``,
#: ``__array_namespace__``) and operators, keyed ``"ufunc"``, ``"function"``, ``"namespace"``,
#: ``"operator"``. They live in
#: :mod:`hpcsuite.pgas.numpy_api`, which sits above this module (it needs ``copy``, ``matmul`` and
#: ``scan``, which import DistArray) and fills this table when ``hpcsuite.pgas`` is imported.
NUMPY_PROTOCOL: dict = {}


@functools.lru_cache(maxsize=None)
def _mpi_type_cached(dstr: str) -> MPI.Datatype:
    dt = np.dtype(dstr)
    t = MPI._typedict.get(dt.char) if dt.isnative else None
    if t is not None and t.Get_size() == dt.itemsize:
        return t                      # a predefined type: nothing to free
    try:
        t = dtlib.from_numpy_dtype(dt)
    except Exception:
        raise ValueError(f"dtype {dt} has no MPI equivalent; use a numeric dtype") from None
    _derived_types.append(t)
    return t


_derived_types: list = []


def mpi_type(dtype) -> MPI.Datatype:
    """The MPI datatype for a NumPy dtype (``ValueError`` when there is none). Cached per dtype."""
    return _mpi_type_cached(np.dtype(dtype).str)


@atexit.register
def _free_derived_types() -> None:
    if not MPI.Is_finalized():
        for t in _derived_types:
            t.Free()
        _derived_types.clear()


def _node_rank(team, device: str) -> int:
    """This rank's index on its node, for spreading ranks over a node's GPUs. Collective once per
    team (the node communicator is shared with the array memory)."""
    if device == "gpu":
        from ..runtime import gpu_status
        ok, why = gpu_status()
        if not ok:             # fail before any communication, identically on every rank
            from ..runtime import InputError
            raise InputError(f"device 'gpu' requested but no GPU is usable: {why}")
        return node_comm(team).Get_rank()
    return 0


@functools.lru_cache(maxsize=None)
def _no_halo_spec(ndim: int):
    from .halo import HaloSpec
    return HaloSpec.build((0,) * ndim, "none", False, ndim)


def _widths(halo, ndim: int) -> tuple[int, ...]:
    if isinstance(halo, (int, np.integer)) and not isinstance(halo, bool):
        w = (int(halo),) * ndim
    else:
        w = tuple(int(h) for h in halo)
    if len(w) != ndim or any(x < 0 for x in w):
        raise ValueError(f"halo must be a non-negative int or {ndim} of them, got {halo!r}")
    return w


class DistArray(NDArrayOperatorsMixin):
    """An N-D array distributed over a team. Creating one is collective.

    Parameters
    ----------
    shape : int or tuple of int
        Global shape.
    dtype : dtype, default float64
        Element type (must map to an MPI type).
    dist : DistSpec or sequence of DistSpec
        Distribution per dimension (see :class:`~hpcsuite.pgas.Pattern`), default ``BLOCKED``
        along dimension 0.
    team : Team, optional
        The units holding the array (default: the world). Sub-teams work.
    grid : sequence of int or ProcessGrid, optional
        Process-grid extents (0 = choose).
    halo : int or sequence of int
        Ghost-cell width per dimension around each local block (BLOCKED / NONE dimensions only).
    boundary : str, float or sequence
        Halo boundary per dimension: ``"periodic"``, ``"none"`` (ghosts at the global edge are left
        alone) or a number (a fixed value). Default ``"none"``.
    corners : bool
        Whether :meth:`halo.update() <hpcsuite.pgas.halo.Halo.update>` also fills edge and corner
        ghosts (needed by 27-point stencils).
    device : {"cpu", "gpu"}
        Where the local storage lives.
    shm : bool, optional
        Read and write same-node units' storage directly through shared memory (default true,
        or ``$HPCSUITE_PGAS_SHM``); ``False`` sends every remote access through MPI RMA.

    Raises
    ------
    ValueError
        On every rank, before any communication, for a shape, dtype, distribution, grid or halo
        that cannot work.

    Notes
    -----
    A DistArray speaks NumPy (see the guide's "NumPy on DistArrays" section): operators and ufuncs
    (``a * 2 + b``, ``np.sqrt(a)``), reductions (``a.sum(axis=0)``, ``np.max(a)``), ``a.T @ b``
    and ``__array_namespace__``; all of these are collective.

    Arrays they return are released when their last reference goes, never inside ``__del__``
    itself (a free is collective, and the cyclic garbage collector runs at different moments on
    different ranks): ``__del__`` queues the array, and the queue is released at the team's next
    collective point (the next array creation or ``free()`` on the team), in creation order.
    Arrays dropped by reference counting are released there directly (in SPMD code every rank
    drops them at the same program point: hold and drop results alike on every rank); arrays the
    garbage collector found (reference cycles) only once every rank has queued them, agreed with
    one ``allgather`` at :func:`pgas.collect() <hpcsuite.pgas.lifetime.collect>` and at every
    :data:`~hpcsuite.pgas.lifetime.AGREE_EVERY`-th allocation of new windows; at exit everything
    is freed. Arrays made with the constructors (``zeros``, ``from_numpy``, ...) need ``free()``.

    Nothing is ever gathered silently: ``np.asarray(a)`` and unsupported NumPy functions raise
    ``TypeError``; :meth:`to_numpy` gathers.
    """

    __hash__ = object.__hash__          # identity, as before the operators (== is elementwise)
    #: Released when its last reference goes (see the notes above), instead of by ``free()``: set
    #: on the arrays the NumPy protocols return. Internal to hpcsuite (``pgas``'s NumPy modules).
    auto_free = False

    def __init__(self, shape, dtype=np.float64, dist=BLOCKED, team: Team | None = None, grid=None,
                 halo=0, boundary="none", corners: bool = False, device="cpu", shm: bool | None = None):
        team = team if team is not None else Team.world()
        if not isinstance(team, Team):
            raise ValueError(f"team must be a Team, got {team!r}")
        self.pattern = Pattern(shape, dist, team=team, grid=grid)
        self.team = team
        self.dtype = np.dtype(dtype)
        self._mpitype = mpi_type(self.dtype)
        self.halo_width = _widths(halo, self.pattern.ndim)
        # one GPU per rank on a node: the rank's index on its node picks the device
        self.device = get_device(device) if device in ("cpu", None) or not isinstance(device, str) \
            else get_device(device, local_rank=_node_rank(team, device))
        if any(self.halo_width):
            if self.pattern.tiled or any(m.cyclic for m, w in zip(self.pattern.maps, self.halo_width) if w):
                raise ValueError("halos need BLOCKED or NONE along every dimension with a halo width > 0, "
                                 f"got dist {self.pattern.dist} with halo {self.halo_width}")
            for d, (m, w) in enumerate(zip(self.pattern.maps, self.halo_width)):
                if w and min(m.size(0), m.size(m.p - 1)) < w:
                    raise ValueError(f"halo width {w} along dimension {d} exceeds the smallest local "
                                     f"extent {min(m.size(0), m.size(m.p - 1))}; use fewer units or a "
                                     f"narrower halo")
        from .halo import HaloSpec
        self._setup(HaloSpec.build(self.halo_width, boundary, corners, self.pattern.ndim), shm)

    @classmethod
    def from_pattern(cls, pattern: Pattern, dtype, team: Team, device, shm=None) -> "DistArray":
        """A new uninitialised array of an existing (already validated) pattern, without halo.
        Collective (as the constructor).

        Internal to hpcsuite: what the NumPy protocols (``pgas.arith`` and its neighbours) make
        per result, without re-validating or rebuilding the pattern.

        Parameters
        ----------
        pattern : Pattern
            The distribution, shared with the arrays it came from (patterns never change).
        dtype : dtype
            Element type.
        team : Team
            The pattern's team.
        device : Device
            Where the local storage lives (``like.device`` of an existing array).
        shm : bool, optional
            As for the constructor.
        """
        self = cls.__new__(cls)
        self.pattern, self.team = pattern, team
        self.dtype = np.dtype(dtype)
        self._mpitype = mpi_type(self.dtype)
        self.halo_width = (0,) * pattern.ndim
        self.device = device
        self._setup(_no_halo_spec(pattern.ndim), shm)
        return self

    def _setup(self, halo_spec, shm) -> None:
        """The storage: a pooled or new segment of the pattern's layout. Collective."""
        team, pattern = self.team, self.pattern
        self._halo_spec = halo_spec
        self._halo = None
        # arrays without halo share the pattern's cache of storage shapes (patterns do not change)
        self._storage_shapes = pattern.storage_cache if not any(self.halo_width) else {}
        self._storage_strides: dict[int, tuple] = {}
        self._plans: "collections.OrderedDict" = collections.OrderedDict()
        # the same key on every rank: the global geometry (pooled segments are reused by arrays
        # of exactly this layout); the nominal size is the average block, also global
        key = pattern.layout_key + (self.halo_width,)
        nominal = -(-pattern.size // max(team.size, 1)) * self.dtype.itemsize
        lifetime.drain(team)                  # a collective point: release dropped results first
        self._seq = lifetime.next_id(team)    # the same on every rank (creation is collective)
        self._seg = acquire(team, self.padded_storage_shape(team.rank), self.dtype, shm=shm,
                            key=key, nominal_bytes=nominal)
        self._freed = False
        self._set_views()
        self._dev_storage = None
        if self.device.is_gpu:
            self._dev_storage = self.device.xp.zeros(self._seg.shape, dtype=self.dtype)

    # ------------------------------------------------------------------ shape and views
    def padded_storage_shape(self, unit: int) -> tuple[int, ...]:
        """The shape of ``unit``'s stored block: its :meth:`Pattern.storage_shape
        <hpcsuite.pgas.Pattern.storage_shape>` with the halo on both sides (what
        :attr:`segment` ``.array`` is on that unit). Local.

        Internal to hpcsuite (``redistribute`` and ``sync`` address elements in it).
        """
        s = self._storage_shapes.get(unit)
        if s is None:
            base = self.pattern.storage_shape(unit)
            s = tuple(n + 2 * w for n, w in zip(base, self.halo_width)) if any(self.halo_width) else base
            self._storage_shapes[unit] = s
        return s

    def element_address(self, gidx: tuple[int, ...]) -> tuple[int, int]:
        """``(unit, displacement)`` of one element in its owner's padded storage, the displacement
        in elements (the unit of the :attr:`segment` window). Local: O(ndim) arithmetic with
        cached strides.

        Internal to hpcsuite (``pgas.sync``'s atomics).

        Parameters
        ----------
        gidx : tuple of int
            A full, non-negative, in-range global index (not checked here).
        """
        p = self.pattern
        owners = [int(m.owner(g)) for m, g in zip(p.maps, gidx)]
        unit = p.unit_of(owners)
        lidx = [int(m.local(g)) for m, g in zip(p.maps, gidx)]
        pos = p.storage_index(lidx) if p.tiled else lidx
        strides = self._storage_strides.get(unit)
        if strides is None:
            shape = self.padded_storage_shape(unit)
            strides = tuple(math.prod(shape[k + 1:]) for k in range(len(shape)))
            self._storage_strides[unit] = strides
        w = self.halo_width
        return unit, sum((i + (w[k] if k < len(w) else 0)) * st for k, (i, st) in enumerate(zip(pos, strides)))

    def _set_views(self) -> None:
        st = self._seg.array
        w = self.halo_width
        self._local = st[tuple(slice(x, n - x) for x, n in zip(w, st.shape))] if any(w) else st

    # ------------------------------------------------------------------ internal interface
    # What the other modules of pgas (redistribute, hdf5, sync, summa, sort, halo, algorithms, the
    # NumPy protocols) and linalg need from an array, as documented names instead of its private
    # attributes: the storage (host segment, device buffer, owned block), its MPI element type,
    # addresses in it, liveness (check_alive, freed), and from_pattern / auto_free for results.
    # Internal to hpcsuite: not the user API (the guide does not list them); they change with the
    # modules that use them. tests/test_private_attributes.py keeps other modules off the
    # underscored names.
    @property
    def segment(self):
        """The globally addressable host storage of this unit, a ``Segment`` of
        ``hpcsuite.pgas.memory``. Local.

        ``segment.array`` is the padded storage (the owned block with its halo around it,
        C-contiguous, shape :meth:`padded_storage_shape`); on GPU arrays it is the host copy that
        one-sided access and I/O use (see :meth:`update_host`). ``segment.win`` is the team window
        (displacement unit one element, locked for the array's lifetime), ``segment.flush()``
        completes one-sided operations, ``segment.shm`` and ``segment.node_rank_of`` say which
        peers' storage is mapped here.

        Internal to hpcsuite (``redistribute``, ``hdf5``, ``sync``).
        """
        return self._seg

    @property
    def device_storage(self):
        """GPU arrays: the padded storage on the device (laid out like ``segment.array``);
        ``None`` on CPU arrays. Local.

        Internal to hpcsuite (``redistribute``, ``hdf5``, ``summa``).
        """
        return self._dev_storage

    @device_storage.setter
    def device_storage(self, storage) -> None:
        """GPU arrays: make ``storage`` (a device array of the padded storage's shape and dtype,
        already holding its values) the device storage, e.g. memory that CUDA IPC can export.
        Views of :attr:`local` taken before keep the old memory. Local.

        Internal to hpcsuite (``device_rma``).
        """
        old = self._dev_storage
        if old is None or tuple(storage.shape) != tuple(old.shape) or storage.dtype != self.dtype:
            raise ValueError("device_storage: a GPU array's storage can only be replaced by a device "
                             f"array of shape {None if old is None else tuple(old.shape)} and dtype {self.dtype}")
        self._dev_storage = storage

    @property
    def host_local(self) -> np.ndarray:
        """This unit's owned block in the host storage: a writable view of ``segment.array``
        without the halo. The same memory as :attr:`local` on CPU arrays; on GPU arrays the host
        copy (current after :meth:`update_host`). Local.

        Internal to hpcsuite (``redistribute``, ``summa``).
        """
        return self._local

    @property
    def mpitype(self) -> MPI.Datatype:
        """The MPI datatype of one element (``mpi_type(dtype)``: cached, never freed by the
        caller). Local.

        Internal to hpcsuite (``redistribute``, ``sort``).
        """
        return self._mpitype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.pattern.shape

    @property
    def ndim(self) -> int:
        return self.pattern.ndim

    @property
    def size(self) -> int:
        return self.pattern.size

    @property
    def dist(self):
        return self.pattern.dist

    @property
    def grid(self) -> tuple[int, ...]:
        return self.pattern.grid

    @property
    def local(self):
        """This unit's owned elements: a writable NumPy view (CuPy on GPU), no halo.

        For TILE patterns its shape is ``(tiles..., tile extents...)`` (:meth:`Pattern.storage_shape`).
        """
        self.check_alive()
        if self._dev_storage is not None:
            w = self.halo_width
            st = self._dev_storage
            return st[tuple(slice(x, n - x) for x, n in zip(w, st.shape))] if any(w) else st
        return self._local

    @property
    def local_with_halo(self):
        """The local block including its ghost cells (same as :attr:`local` without halo)."""
        self.check_alive()
        return self._dev_storage if self._dev_storage is not None else self._seg.array

    @property
    def local_shape(self) -> tuple[int, ...]:
        return self.pattern.local_shape(self.team.rank)

    @property
    def local_indices(self) -> tuple[np.ndarray, ...]:
        """Per dimension, the global indices of this unit's local rows/columns/... (in order)."""
        return self.pattern.owned_indices(self.team.rank)

    @property
    def local_slices(self) -> tuple[slice, ...]:
        """Global slices of this unit's block; only for BLOCKED / NONE patterns (one block each)."""
        if self.pattern.tiled or any(m.cyclic for m in self.pattern.maps):
            raise ValueError("local_slices needs a BLOCKED/NONE pattern; use local_indices")
        c = self.pattern.unit_coords(self.team.rank)
        return tuple(slice(m.start(ci), m.start(ci) + m.size(ci)) for m, ci in zip(self.pattern.maps, c))

    def local_global_indices(self) -> tuple[np.ndarray, ...]:
        """Global index arrays broadcastable over :attr:`local` (for owner-computes formulas)."""
        return self.pattern.local_global_indices(self.team.rank)

    @property
    def halo(self):
        """The :class:`~hpcsuite.pgas.halo.Halo` of this array (``update()``, ``update_async()``)."""
        self.check_alive()
        if self._halo is None:
            from .halo import Halo
            self._halo = Halo(self, self._halo_spec)
        return self._halo

    def __repr__(self) -> str:
        state = "freed" if self._freed else f"local {self.local_shape} on rank {self.team.rank}"
        return (f"DistArray(shape={self.shape}, dtype={self.dtype}, dist=({', '.join(map(repr, self.dist))}), "
                f"grid={self.grid}, {state})")

    def __len__(self) -> int:
        return self.shape[0]

    # ------------------------------------------------------------------ NumPy protocols (collective)
    # thin: the work is in numpy_api, arith, reductions, manipulation and namespace
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return NUMPY_PROTOCOL["ufunc"](ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return NUMPY_PROTOCOL["function"](func, types, args, kwargs)

    def __array_namespace__(self, *, api_version=None):
        return NUMPY_PROTOCOL["namespace"](api_version)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DistArray is not converted to a NumPy array implicitly (that would gather "
                        "it on every rank); use a.to_numpy() (collective) or a.local")

    def __bool__(self) -> bool:
        """The value of a one-element array. Collective (a gather); ``ValueError`` otherwise."""
        if self.size != 1:
            raise ValueError(f"the truth value of a DistArray with {self.size} elements is ambiguous; "
                             f"use a.any() or a.all() (collective)")
        return bool(self.to_numpy().reshape(()))

    @property
    def T(self) -> "DistArray":
        """The transpose (reversed axes): ``numpy.transpose``. Collective."""
        return np.transpose(self)

    @property
    def mT(self) -> "DistArray":
        """The last two axes swapped (array API's matrix transpose). Collective."""
        return NUMPY_PROTOCOL["namespace"](None).matrix_transpose(self)

    def transpose(self, *axes) -> "DistArray":
        """``numpy.transpose(a, axes)``. Collective."""
        return np.transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def reshape(self, *shape) -> "DistArray":
        """``numpy.reshape`` where the layout allows it without moving data. Collective."""
        return np.reshape(self, shape[0] if len(shape) == 1 else shape)

    def astype(self, dtype, copy: bool = True) -> "DistArray":
        """A new array of ``dtype`` with the same pattern (``self`` if ``copy=False`` and the
        dtype is already ``dtype``). Collective."""
        return NUMPY_PROTOCOL["namespace"](None).astype(self, dtype, copy=copy)

    def copy(self) -> "DistArray":
        """A new array with the same values and pattern (no halo). Collective."""
        return np.copy(self)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        """``numpy.sum`` (also ``initial=``, ``where=``). Collective."""
        return np.sum(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        """``numpy.prod`` (also ``initial=``, ``where=``). Collective."""
        return np.prod(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        """``numpy.mean`` (also ``where=``). Collective."""
        return np.mean(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        """``numpy.var``. Collective."""
        return np.var(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kwargs)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        """``numpy.std``. Collective."""
        return np.std(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kwargs)

    def min(self, axis=None, out=None, keepdims=False, **kwargs):
        """``numpy.min`` (also ``initial=``, ``where=``). Collective."""
        return np.min(self, axis=axis, out=out, keepdims=keepdims, **kwargs)

    def max(self, axis=None, out=None, keepdims=False, **kwargs):
        """``numpy.max`` (also ``initial=``, ``where=``). Collective."""
        return np.max(self, axis=axis, out=out, keepdims=keepdims, **kwargs)

    def argmin(self, axis=None, out=None, keepdims=False):
        """``numpy.argmin``. Collective."""
        return np.argmin(self, axis=axis, out=out, keepdims=keepdims)

    def argmax(self, axis=None, out=None, keepdims=False):
        """``numpy.argmax``. Collective."""
        return np.argmax(self, axis=axis, out=out, keepdims=keepdims)

    def any(self, axis=None, out=None, keepdims=False, **kwargs):
        """``numpy.any`` (also ``where=``). Collective."""
        return np.any(self, axis=axis, out=out, keepdims=keepdims, **kwargs)

    def all(self, axis=None, out=None, keepdims=False, **kwargs):
        """``numpy.all`` (also ``where=``). Collective."""
        return np.all(self, axis=axis, out=out, keepdims=keepdims, **kwargs)

    def clip(self, min=None, max=None, out=None):   # noqa: A002 - NumPy's names
        """``numpy.clip``. Collective."""
        return np.clip(self, min, max, out=out)

    # ------------------------------------------------------------------ lifetime
    def check_alive(self) -> None:
        """Raise ``RuntimeError`` if the array was freed. Local.

        Internal to hpcsuite: the first check of the operations on arrays in ``pgas`` and
        ``linalg``.
        """
        if self._freed:
            raise RuntimeError("this DistArray was freed; it can no longer be used")

    @property
    def freed(self) -> bool:
        """Whether the array was released (:meth:`free`, or queued for release). Local."""
        return self._freed

    def free(self) -> None:
        """Release the array's windows and memory (into the reuse pool when it fits). Collective;
        idempotent. Also releases the dropped results queued on the team (see ``__del__``)."""
        lifetime.drain(self.team)
        if self._freed:
            if self._halo is not None:
                self._halo.free()
                self._halo = None
            return
        self._freed = True
        _releaser(self._seg, self._halo, list(self._plans.values()))()
        self._halo = None
        self._plans.clear()
        self._local = None
        self._dev_storage = None

    def __del__(self):
        # Arrays returned by the NumPy protocols go when their last reference goes, as NumPy's do.
        # Never a collective here (the cyclic garbage collector runs at different moments on
        # different ranks): the resources are queued and released at the team's next collective
        # point, in an order agreed by all ranks (pgas.lifetime).
        if self.auto_free and not getattr(self, "_freed", True) and not MPI.Is_finalized():
            self._freed = True
            lifetime.defer(self.team, self._seq, _releaser(self._seg, self._halo,
                                                           list(self._plans.values())),
                           segment=self._seg)      # named, not found in the closure: for the view check

    def __enter__(self) -> "DistArray":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    # ------------------------------------------------------------------ global view: get
    def peer_storage(self, unit: int) -> np.ndarray | None:
        """A NumPy view of ``unit``'s padded host storage when it is mapped here (same node, shared
        memory on), else ``None``. Local.

        Internal to hpcsuite (``redistribute``'s shared-memory copy).
        """
        return self._seg.peer_view(unit, self.padded_storage_shape(unit))

    def _direct_index(self, piece, unit_storage_shape):
        """Index into a unit's padded storage for a piece (shared-memory path)."""
        if self.pattern.tiled:
            return storage_offsets(piece, self.pattern, unit_storage_shape)
        li = piece.local_index()
        w = self.halo_width
        if not any(w):
            return li
        if isinstance(li[0], slice):
            return tuple(slice(s.start + x, s.stop + x, s.step) for s, x in zip(li, w))
        return tuple(a + x for a, x in zip(li, w))

    def _access(self, idx) -> "_Access":
        """The transfer plan for ``idx``: cached per index expression (up to 64 per array), so
        repeated accesses to the same region skip planning and datatype construction."""
        key = index_key(idx)
        acc = self._plans.get(key) if key is not None else None
        if acc is not None:
            self._plans.move_to_end(key)
            return acc
        sels, out_shape = normalize(idx, self.shape)
        full = tuple(s.count for s in sels)
        pieces = plan(self.pattern, sels)
        halo = self.halo_width if any(self.halo_width) else None
        acc = _Access(full, out_shape, [], [], [], [], key is None)
        for pc in pieces:
            ushape = self.padded_storage_shape(pc.unit)
            view = self._seg.peer_view(pc.unit, ushape)
            ridx = pc.result_index(None)
            if view is not None:
                didx = self._direct_index(pc, ushape)
                acc.direct.append((view.reshape(-1) if self.pattern.tiled else view, ridx, didx))
                continue
            dtype, disp, count = target_datatype(pc, self.pattern, ushape, self._mpitype, halo)
            if dtype is not self._mpitype:
                acc.types.append(dtype)
            acc.remote.append((pc.unit, ridx, pc.shape, (disp, count, dtype)))
            if pc.unit not in acc.targets:
                acc.targets.append(pc.unit)
        if key is not None:
            self._plans[key] = acc
            if len(self._plans) > 64:
                _, old = self._plans.popitem(last=False)
                old.free()
        return acc

    def _start_get(self, acc, result: np.ndarray) -> list:
        """Copy the same-node pieces and start the RMA gets; returns deferred scatters."""
        for view, ridx, didx in acc.direct:
            result[ridx] = view[didx]
        whole = len(acc.remote) == 1 and not acc.direct and result.flags.c_contiguous
        deferred = []
        for unit, ridx, shape, target in acc.remote:
            buf = result if whole else np.empty(shape, dtype=self.dtype)
            # Get/Put are non-blocking until a flush; request-based Rget/Rput are not used because
            # MPICH 4.0 with UCX corrupts request-based transfers with derived target types.
            self._seg.win.Get(buf, unit, target)
            if not whole:
                deferred.append((ridx, buf))
        return deferred

    def get(self, idx, out: np.ndarray | None = None):
        """Read the elements ``idx`` (ints, slices with steps, ``...``) from any rank. One-sided.

        Returns a NumPy array (a NumPy scalar for a single element), or fills ``out`` (a
        C-contiguous array of the selection's shape and the array's dtype) and returns it; reusing
        ``out`` avoids allocating (and first-touching) a new buffer for every read. Raises
        ``IndexError`` naming the index and the global shape when out of range.
        """
        self.check_alive()
        acc = self._access(idx)
        if out is None:
            result = np.empty(acc.full_shape, dtype=self.dtype)
        else:
            if out.shape != acc.out_shape or out.dtype != self.dtype or not out.flags.c_contiguous:
                raise ValueError(f"out must be a C-contiguous {self.dtype} array of shape {acc.out_shape}, "
                                 f"got {out.dtype} {out.shape}")
            result = out.reshape(acc.full_shape)
        deferred = self._start_get(acc, result)
        for t in acc.targets:
            self._seg.win.Flush(t)
        for ridx, buf in deferred:
            result[ridx] = buf
        if acc.ephemeral:
            acc.free()
        if out is not None:
            return out
        return result.reshape(acc.out_shape)[()] if acc.out_shape == () else result.reshape(acc.out_shape)

    __getitem__ = get

    def get_async(self, idx) -> "GetHandle":
        """Start reading ``idx``; ``handle.wait()`` returns the array. One-sided."""
        self.check_alive()
        acc = self._access(idx)
        result = np.empty(acc.full_shape, dtype=self.dtype)
        deferred = self._start_get(acc, result)
        if acc.ephemeral:
            acc.free()
        return GetHandle(self._seg, result, acc.out_shape, acc.targets, deferred)

    # ------------------------------------------------------------------ global view: put
    def _start_put(self, idx, value):
        acc = self._access(idx)
        try:
            v = np.broadcast_to(np.asarray(value, dtype=self.dtype), acc.out_shape).reshape(acc.full_shape)
        except ValueError:
            raise ValueError(f"cannot assign a value of shape {np.shape(value)} to a selection of "
                             f"shape {acc.out_shape}") from None
        for view, ridx, didx in acc.direct:
            view[didx] = v[ridx]
        keep = []
        for unit, ridx, shape, target in acc.remote:
            src = np.ascontiguousarray(v[ridx])
            self._seg.win.Put(src, unit, target)
            keep.append(src)
        if acc.ephemeral:
            acc.free()
        return keep, acc.targets

    def __setitem__(self, idx, value) -> None:
        """Write ``value`` (broadcast to the selection) into ``idx`` from any rank. One-sided;
        returns when the data is in the owners' memory."""
        self.check_alive()
        _, targets = self._start_put(idx, value)
        for t in targets:
            self._seg.win.Flush(t)
        self._seg.shm_win.Sync()

    def put_async(self, idx, value) -> "PutHandle":
        """Start writing ``value`` into ``idx``; ``handle.wait()`` completes it at the owners. One-sided."""
        self.check_alive()
        keep, targets = self._start_put(idx, value)
        return PutHandle(self._seg, keep, targets)

    def flush(self) -> None:
        """Complete every outstanding one-sided operation this rank issued on the array. Local."""
        self.check_alive()
        self._seg.flush()

    def sync(self) -> None:
        """Complete all one-sided operations and wait for every unit. Collective."""
        self.check_alive()
        self._seg.flush()
        self.team.barrier()
        self._seg.shm_win.Sync()

    # ------------------------------------------------------------------ whole-array transfers
    def to_numpy(self, root: int | None = None) -> np.ndarray | None:
        """The whole array as one NumPy array: on every rank (``root=None``) or only on ``root``
        (others get ``None``). Collective; needs memory for the whole array where it lands."""
        self.check_alive()
        p = self.pattern
        mine = np.ascontiguousarray(p.storage_to_local(self.local_on_host()))
        counts = [p.local_size(u) for u in range(self.team.size)]
        displs = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        if root is None:
            flat = np.empty(sum(counts), dtype=self.dtype)
            observed(self.team, "Allgatherv", mine.nbytes, self.team.comm.Allgatherv, mine,
                     [flat, counts, displs, self._mpitype])
        else:
            flat = np.empty(sum(counts), dtype=self.dtype) if self.team.rank == root else None
            observed(self.team, "Gatherv", mine.nbytes, self.team.comm.Gatherv, mine,
                     [flat, counts, displs, self._mpitype] if flat is not None else None, root=root)
            if self.team.rank != root:
                return None
        out = np.empty(self.shape, dtype=self.dtype)
        for u in range(self.team.size):
            if counts[u]:
                block = flat[displs[u]:displs[u] + counts[u]].reshape(p.local_shape(u))
                _place(out, p, u, block)
        return out

    def local_on_host(self) -> np.ndarray:
        """This unit's owned block on the host, current: :attr:`host_local` on CPU arrays, a
        device-to-host copy of :attr:`local` on GPU arrays. Local.

        Internal to hpcsuite (``summa``, ``to_numpy``).
        """
        return self.device.to_host(self.local) if self.device.is_gpu else self._local

    def update_host(self) -> None:
        """GPU arrays: copy the device block to the host memory that one-sided access and I/O
        use. Collective (ends with a barrier so remote readers see it). No-op on CPU arrays."""
        if self._dev_storage is not None:
            self._seg.array[...] = self.device.to_host(self._dev_storage)
            self.sync()

    def update_device(self) -> None:
        """GPU arrays: copy the host memory (after remote puts) back to the device block.
        Collective (starts with a sync). No-op on CPU arrays."""
        if self._dev_storage is not None:
            self.sync()
            self._dev_storage[...] = self.device.xp.asarray(self._seg.array)


# ---------------------------------------------------------------------- operators, with elision
# NumPy reuses a temporary operand of a binary operator as the result's buffer when nothing else
# refers to it (``a * 2 + b``: ``+`` writes into ``a * 2``'s buffer). The operators below do the
# same for DistArray temporaries (results of the NumPy protocols): an operand whose reference count
# inside the operator method is that of an expression temporary, measured once at import with a
# probe class called the same way (a named operand counts one more). Where an interpreter counts
# a named operand like a temporary (stack references borrowed), elision stays off. Whether a new
# (collectively allocated) array is made then depends on the references held: SPMD code holds
# them alike on every rank, as it must for the releases (see DistArray's notes).

def _probe_counts():
    class P:
        def __add__(self, other):
            return sys.getrefcount(self), sys.getrefcount(other)

        def __radd__(self, other):
            return (sys.getrefcount(self),)

        def __neg__(self):
            return (sys.getrefcount(self),)

    def temporaries():
        return P() + P(), 1 + P(), -P()

    def named():
        x, y = P(), P()
        return x + y, 1 + x, -x
    temp = {n for t in temporaries() for n in t}
    held = {n for t in named() for n in t}
    return temp.pop() if len(temp) == 1 and min(held) > max(temp) else None


#: the reference count of an operand that only the expression holds (None: elision off)
TEMP_REFS = _probe_counts()


def _defers(other) -> bool:
    """NumPy's rule: an operand with ``__array_ufunc__ = None`` takes over the operator."""
    return getattr(type(other), "__array_ufunc__", False) is None


def _binary(ufunc):
    def forward(self, other):
        t = TEMP_REFS
        cand = self if t is not None and sys.getrefcount(self) <= t else \
            other if t is not None and sys.getrefcount(other) <= t else None
        if _defers(other):
            return NotImplemented
        return NUMPY_PROTOCOL["operator"](ufunc, (self, other), cand)

    def reflected(self, other):
        cand = self if TEMP_REFS is not None and sys.getrefcount(self) <= TEMP_REFS else None
        if _defers(other):
            return NotImplemented
        return NUMPY_PROTOCOL["operator"](ufunc, (other, self), cand)
    return forward, reflected


def _unary(ufunc):
    def op(self):
        cand = self if TEMP_REFS is not None and sys.getrefcount(self) <= TEMP_REFS else None
        return NUMPY_PROTOCOL["operator"](ufunc, (self,), cand)
    return op


for _name, _uf in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide), ("mod", np.remainder),
                   ("pow", np.power), ("lshift", np.left_shift), ("rshift", np.right_shift),
                   ("and", np.bitwise_and), ("xor", np.bitwise_xor), ("or", np.bitwise_or)):
    _f, _r = _binary(_uf)
    _f.__name__, _r.__name__ = f"__{_name}__", f"__r{_name}__"
    _f.__doc__ = _r.__doc__ = f"``numpy.{_uf.__name__}`` (a temporary operand's buffer is reused). Collective."
    setattr(DistArray, f"__{_name}__", _f)
    setattr(DistArray, f"__r{_name}__", _r)
for _name, _uf in (("lt", np.less), ("le", np.less_equal), ("eq", np.equal), ("ne", np.not_equal),
                   ("gt", np.greater), ("ge", np.greater_equal)):
    _f, _ = _binary(_uf)
    _f.__name__ = f"__{_name}__"
    setattr(DistArray, f"__{_name}__", _f)
for _name, _uf in (("neg", np.negative), ("pos", np.positive), ("abs", np.absolute), ("invert", np.invert)):
    _f = _unary(_uf)
    _f.__name__ = f"__{_name}__"
    setattr(DistArray, f"__{_name}__", _f)


def _releaser(seg, halo, plans):
    """A callable that frees an array's halo requests, cached transfer datatypes and segment
    (collective: the segment goes into the pool or its windows are freed)."""
    def release():
        if halo is not None:
            halo.free()
        for acc in plans:
            acc.free()
        seg.free()
    return release


def _place(out: np.ndarray, pattern: Pattern, unit: int, block: np.ndarray) -> None:
    """Put ``unit``'s block (local-index order) into the global array ``out``."""
    if not any(m.cyclic for m in pattern.maps):
        c = pattern.unit_coords(unit)
        out[tuple(slice(m.start(ci), m.start(ci) + m.size(ci)) for m, ci in zip(pattern.maps, c))] = block
    else:
        out[np.ix_(*pattern.owned_indices(unit))] = block


def _take(arr: np.ndarray, pattern: Pattern, unit: int) -> np.ndarray:
    """``unit``'s elements of the global array ``arr`` in local-index order."""
    if not any(m.cyclic for m in pattern.maps):
        c = pattern.unit_coords(unit)
        return arr[tuple(slice(m.start(ci), m.start(ci) + m.size(ci)) for m, ci in zip(pattern.maps, c))]
    return arr[np.ix_(*pattern.owned_indices(unit))]


@dataclass
class _Access:
    """A planned one-sided access: same-node copies, RMA transfers and their completion set."""

    full_shape: tuple
    out_shape: tuple
    direct: list            # (storage view, result index, storage index)
    remote: list            # (unit, result index, piece shape, (disp, count, datatype))
    targets: list           # units to flush
    types: list             # derived datatypes owned by this plan
    ephemeral: bool         # not cached: free the datatypes after use

    def free(self) -> None:
        for t in self.types:
            t.Free()
        self.types = []


class GetHandle:
    """An outstanding :meth:`DistArray.get_async`; :meth:`wait` returns the data."""

    def __init__(self, seg, result, out_shape, targets, deferred):
        self._seg, self._result, self._shape = seg, result, out_shape
        self._targets, self._deferred = targets, deferred
        self._done = False

    def wait(self):
        """Complete the transfer (flush its targets) and return the data. Local."""
        if not self._done:
            for t in self._targets:
                self._seg.win.Flush(t)
            for ridx, buf in self._deferred:
                self._result[ridx] = buf
            self._done = True
        r = self._result.reshape(self._shape)
        return r[()] if self._shape == () else r


class PutHandle:
    """An outstanding :meth:`DistArray.put_async`; :meth:`wait` completes it at the targets."""

    def __init__(self, seg, keep, targets):
        self._seg, self._keep, self._targets = seg, keep, targets
        self._done = False

    def wait(self) -> None:
        """Complete the transfer at the owners (flush its targets). Local."""
        if not self._done:
            for t in self._targets:
                self._seg.win.Flush(t)
            self._seg.shm_win.Sync()
            self._keep = None          # the source buffers may go now
            self._done = True


# ---------------------------------------------------------------------- constructors (collective)
def empty(shape, dtype=np.float64, **kw) -> DistArray:
    """A new uninitialised :class:`DistArray`. Collective (keywords as ``DistArray``)."""
    return DistArray(shape, dtype, **kw)


def full(shape, value, dtype=None, **kw) -> DistArray:
    """A new :class:`DistArray` filled with ``value``. Collective."""
    a = DistArray(shape, np.result_type(value) if dtype is None else dtype, **kw)
    a.local[...] = value
    if any(a.halo_width):
        a.local_with_halo[...] = value
    a.team.barrier()
    return a


def zeros(shape, dtype=np.float64, **kw) -> DistArray:
    """A new :class:`DistArray` of zeros. Collective."""
    return full(shape, 0, dtype, **kw)


def ones(shape, dtype=np.float64, **kw) -> DistArray:
    """A new :class:`DistArray` of ones. Collective."""
    return full(shape, 1, dtype, **kw)


def arange(start, stop=None, step=1, dtype=None, **kw) -> DistArray:
    """A 1-D :class:`DistArray` with ``numpy.arange(start, stop, step)``'s values. Collective."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    dtype = np.result_type(start, stop, step) if dtype is None else dtype
    a = DistArray(n, dtype, **kw)
    (gi,) = a.local_global_indices()
    a.local[...] = start + step * gi
    a.team.barrier()
    return a


def from_numpy(arr, dist=BLOCKED, root: int | None = 0, team: Team | None = None, **kw) -> DistArray:
    """A :class:`DistArray` holding ``arr``. Collective.

    With ``root=r`` only rank ``r``'s ``arr`` is used (the others may pass ``None``) and each unit
    receives its part with one ``Scatterv``; with ``root=None`` every rank passes the same array
    and takes its own part without communication.
    """
    team = team or Team.world()
    if root is None:
        arr = np.asarray(arr)
        shape, dtype = arr.shape, arr.dtype
    else:
        meta = (np.shape(arr), np.asarray(arr).dtype.str) if team.rank == root else None
        shape, dstr = team.bcast(meta, root=root)
        dtype = np.dtype(dstr)
    a = DistArray(shape, dtype, dist=dist, team=team, **kw)
    p = a.pattern
    if root is None:
        a.local[...] = a.device.asarray(p.local_to_storage(_take(arr, p, team.rank)))
    else:
        if team.rank == root:
            arr = np.asarray(arr)
            parts = [np.ascontiguousarray(_take(arr, p, u)).reshape(-1) for u in range(team.size)]
            sendbuf = np.concatenate(parts) if parts else np.empty(0, dtype)
            counts = [x.size for x in parts]
            displs = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
            send = [sendbuf, counts, displs, a.mpitype]
        else:
            send = None
        recv = np.empty(p.local_size(team.rank), dtype=dtype)
        observed(team, "Scatterv", recv.nbytes, team.comm.Scatterv, send, recv, root=root)
        a.local[...] = a.device.asarray(p.local_to_storage(recv.reshape(p.local_shape(team.rank))))
    a.team.barrier()
    return a

"""Teams of MPI processes: communicators, node locality and Cartesian process grids.

A :class:`Team` wraps an ``mpi4py`` communicator. Everything above the runtime layer (PGAS arrays,
solvers, the LES, the tuner) talks to MPI through a team, so that communication can be observed in
one place (see :mod:`hpcsuite.runtime.comm_hooks`).

Examples
--------
Run with ``mpiexec -n 4 python example.py``::

    from hpcsuite.runtime import Team
    team = Team.world()            # every rank: team.size == 4
    grid = team.grid(2)            # every rank: grid.dims == (2, 2); rank 3 sees grid.coords == (1, 1)
    row = grid.sub([False, True])  # the ranks of my grid row: row.size == 2
    node = team.split_by_node()    # the ranks on my node (a new team, to free)
    node = team.node_team()        # the same ranks, split once and kept with the team
    rows = team.derived(("rows", 2), lambda t: t.split(t.rank // 2))   # made once, kept with team
"""
from __future__ import annotations

import atexit
import functools
import math
import operator
import pickle
from typing import Sequence

import numpy as np
from mpi4py import MPI

from .comm_hooks import observed
from .waiting import polite, wait, waitall

__all__ = ["Team", "ProcessGrid", "block_range", "block_owner"]

_WORLD = None


def _pymax(a, b):
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def _pymin(a, b):
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


# MPI's predefined reductions as Python functions, for the polite object collectives
# (a list of pairs: MPI.Op objects compare by handle but are not hashable)
_PY_OPS = [(MPI.SUM, operator.add), (MPI.PROD, operator.mul), (MPI.MAX, _pymax), (MPI.MIN, _pymin),
           (MPI.LAND, lambda a, b: a and b), (MPI.LOR, lambda a, b: a or b),
           (MPI.BAND, operator.and_), (MPI.BOR, operator.or_), (MPI.BXOR, operator.xor)]


def _py_op(op):
    """The Python function for a predefined MPI reduction, or ``op`` itself if it is callable."""
    if isinstance(op, MPI.Op):
        return next((f for o, f in _PY_OPS if o == op), None)
    return op if callable(op) else None


def block_range(n: int, parts: int, index: int) -> tuple[int, int]:
    """Start and stop of block ``index`` when ``n`` items are split into ``parts`` near-equal blocks.

    The first ``n % parts`` blocks get one item more, so sizes differ by at most one.
    Non-collective.

    >>> [block_range(10, 4, i) for i in range(4)]
    [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    q, r = divmod(n, parts)
    start = index * q + min(index, r)
    return start, start + q + (1 if index < r else 0)


def block_owner(i: int, n: int, parts: int) -> int:
    """The block (0..parts-1) that item ``i`` of ``n`` falls in under :func:`block_range`. Local."""
    q, r = divmod(n, parts)
    big = r * (q + 1)  # items held by the r larger blocks
    return i // (q + 1) if i < big else r + (i - big) // q


class Team:
    """A group of MPI processes sharing a communicator.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        The communicator; ``MPI.COMM_WORLD`` when omitted.
    parent : Team, optional
        The team this one was split from (``None`` for the world team).

    Notes
    -----
    Creating a team from an existing communicator is local. :meth:`split`, :meth:`split_by_node`
    and :meth:`grid` are collective over this team. Communicators that code needs again and again
    (a node communicator, the rows of a process grid) are made once and kept with the team through
    :meth:`derived`.
    """

    def __init__(self, comm: MPI.Comm | None = None, parent: "Team | None" = None):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.parent = parent
        self.rank: int = self.comm.Get_rank()
        self.size: int = self.comm.Get_size()
        self._derived: dict = {}

    @classmethod
    def world(cls) -> "Team":
        """The team of all processes of the job (``MPI.COMM_WORLD``); one shared object. Local."""
        global _WORLD
        if _WORLD is None:
            _WORLD = Team(MPI.COMM_WORLD)
        return _WORLD

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"

    @property
    def is_root(self) -> bool:
        """True on rank 0 of this team."""
        return self.rank == 0

    # ------------------------------------------------------------------ sub-teams
    def split(self, color: int, key: int | None = None) -> "Team":
        """Split into sub-teams of the ranks that pass the same ``color``. Collective.

        ``color`` must be a non-negative integer, or ``None`` to leave this rank out (the call then
        returns ``None`` on that rank). Ranks are ordered by ``key`` (default: the current rank).
        """
        if color is not None and (not isinstance(color, int) or color < 0):
            raise ValueError(f"split: color must be a non-negative integer or None, got {color!r}")
        c = MPI.UNDEFINED if color is None else color
        sub = self.comm.Split(c, self.rank if key is None else key)
        return None if sub == MPI.COMM_NULL else Team(sub, parent=self)

    def split_by_node(self) -> "Team":
        """The sub-team of the ranks that share this rank's node (shared memory). Collective."""
        return Team(self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank), parent=self)

    def node_team(self) -> "Team":
        """The sub-team of the ranks that share this rank's node, as :meth:`split_by_node`, but
        split once and kept with the team (:meth:`derived`): never free it. Collective the first
        time, local afterwards."""
        return self.derived(("runtime.node",), Team.split_by_node)

    def node_layout(self) -> tuple[int, int]:
        """``(node_index, num_nodes)`` of this rank: nodes numbered by their lowest rank. Collective."""
        leader = self.node_team().comm.bcast(self.rank, root=0)
        leaders = sorted(set(self.comm.allgather(leader)))
        return leaders.index(leader), len(leaders)

    def derived(self, key, make):
        """A communicator (or team) derived from this team: made once, then kept with the team.

        The first call for a ``key`` runs ``make(self)`` and keeps what it returns; later calls
        return that same object. Collective the first time a key is asked for (``make`` usually
        is: every rank must ask for new keys in the same order), local afterwards. Code that gets
        an object here never frees it: it is freed with the team (:meth:`free`) or at exit, newest
        first, before MPI is finalised (and after ``pgas`` has released its windows).

        Parameters
        ----------
        key : hashable
            What the object is, the same on every rank, prefixed by the module that makes it,
            e.g. ``("runtime.node",)`` or ``("pgas.summa.row", grid_dims)``.
        make : callable
            ``make(team)`` -> an ``mpi4py.MPI.Comm``, or anything with a collective ``free()``
            (a :class:`Team`, an object holding several teams).

        Returns
        -------
        object
            What ``make`` returned on the first call for ``key``.

        Examples
        --------
        >>> rows = team.derived(("example.rows",), lambda t: t.split(t.rank // 2))  # collective once
        >>> rows is team.derived(("example.rows",), lambda t: t.split(t.rank // 2))  # local
        True
        """
        obj = self._derived.get(key, _MISSING)
        if obj is _MISSING:
            obj = make(self)
            self._derived[key] = obj
            _DERIVED.append(obj)
        return obj

    def grid(self, dims: int | Sequence[int], periods: bool | Sequence[bool] = False) -> "ProcessGrid":
        """A Cartesian process grid over this team. Collective.

        Parameters
        ----------
        dims : int or sequence of int
            The number of grid dimensions (``MPI.Compute_dims`` picks a balanced shape), or the
            extents per dimension where 0 means "choose" (as in ``MPI_Dims_create``).
        periods : bool or sequence of bool
            Whether each grid dimension wraps around (for neighbour shifts).

        Raises
        ------
        ValueError
            On every rank, before any communication, when the extents cannot multiply to the team
            size.
        """
        shape = grid_shape(self.size, dims)
        nd = len(shape)
        per = [bool(periods)] * nd if isinstance(periods, bool) else [bool(p) for p in periods]
        if len(per) != nd:
            raise ValueError(f"grid: periods has {len(per)} entries for a {nd}-D grid")
        cart = self.comm.Create_cart(shape, periods=per, reorder=False)
        return ProcessGrid(cart, parent=self)

    # ------------------------------------------------------------------ communication
    # Every call below goes through `observed`, the single place where hpcsuite.tune (or a
    # profiler) can intercept communication kernels. Upper-case names take buffers, lower-case
    # names pickle Python objects, as in mpi4py.
    def barrier(self) -> None:
        """Wait for all ranks of the team. Collective."""
        observed(self, "Barrier", 0, _blocking(self.comm.Ibarrier) if polite() else self.comm.Barrier)

    def bcast(self, obj, root: int = 0):
        """Broadcast a Python object from ``root``. Collective."""
        return observed(self, "bcast", 0, self._pbcast if polite() else self.comm.bcast, obj, root=root)

    def Bcast(self, buf, root: int = 0) -> None:
        """Broadcast a buffer in place from ``root``. Collective."""
        observed(self, "Bcast", _nbytes(buf), _blocking(self.comm.Ibcast) if polite() else self.comm.Bcast,
                 buf, root=root)

    def allreduce(self, obj, op=MPI.SUM):
        """Reduce Python objects (numbers, small arrays) onto every rank. Collective."""
        return observed(self, "allreduce", 0, self._pallreduce if polite() else self.comm.allreduce, obj, op=op)

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM) -> None:
        """Reduce buffers onto every rank (``sendbuf`` may be ``MPI.IN_PLACE``). Collective."""
        observed(self, "Allreduce", _nbytes(recvbuf),
                 _blocking(self.comm.Iallreduce) if polite() else self.comm.Allreduce, sendbuf, recvbuf, op=op)

    def allgather(self, obj) -> list:
        """Gather one Python object from each rank onto every rank. Collective."""
        return observed(self, "allgather", 0, self._pallgather if polite() else self.comm.allgather, obj)

    def gather(self, obj, root: int = 0):
        """Gather one Python object from each rank onto ``root``. Collective."""
        return observed(self, "gather", 0, self._pgather if polite() else self.comm.gather, obj, root=root)

    def Allgather(self, sendbuf, recvbuf) -> None:
        """Gather equal-sized buffers onto every rank. Collective."""
        observed(self, "Allgather", _nbytes(recvbuf),
                 _blocking(self.comm.Iallgather) if polite() else self.comm.Allgather, sendbuf, recvbuf)

    def Alltoallv(self, sendspec, recvspec) -> None:
        """All-to-all exchange of variable-sized blocks (``[buf, counts, displs, type]``). Collective."""
        observed(self, "Alltoallv", _nbytes(sendspec[0]),
                 _blocking(self.comm.Ialltoallv) if polite() else self.comm.Alltoallv, sendspec, recvspec)

    def Alltoallw(self, sendspec, recvspec) -> None:
        """All-to-all exchange with per-peer datatypes (``[buf, counts, displs, types]``). Collective."""
        observed(self, "Alltoallw", _nbytes(sendspec[0]),
                 _blocking(self.comm.Ialltoallw) if polite() else self.comm.Alltoallw, sendspec, recvspec)

    def Sendrecv(self, sendbuf, dest: int, recvbuf, source: int, sendtag: int = 0, recvtag: int = 0) -> None:
        """Send to ``dest`` while receiving from ``source``. Point-to-point."""
        observed(self, "Sendrecv", _nbytes(sendbuf), self._psendrecv if polite() else self.comm.Sendrecv,
                 sendbuf, dest, sendtag,
                 recvbuf, source, recvtag)

    def Allgatherv(self, sendbuf, recvspec) -> None:
        """Gather variable-sized buffers onto every rank (``recvspec``: ``[buf, counts, displs,
        type]``). Collective."""
        observed(self, "Allgatherv", _nbytes(recvspec),
                 _blocking(self.comm.Iallgatherv) if polite() else self.comm.Allgatherv, sendbuf, recvspec)

    def Ibcast(self, buf, root: int = 0):
        """Start broadcasting a buffer in place from ``root``; returns the request to hand to
        :meth:`Wait`. Collective (non-blocking: every rank must later wait for it)."""
        return observed(self, "Ibcast", _nbytes(buf), self.comm.Ibcast, buf, root=root)

    def Wait(self, request) -> None:
        """Complete a request started on this team (e.g. by :meth:`Ibcast`); ``None`` is ignored.
        Blocks until this rank's part is done."""
        observed(self, "Wait", 0, _wait, request)

    # ------------------------------------------------------------------ polite object collectives
    # Pickled collectives built on non-blocking buffer collectives, for oversubscribed runs (see
    # runtime.waiting); same results as mpi4py's, reductions applied in rank order.
    def _pallgather(self, obj) -> list:
        data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
        sizes = np.empty(self.size, dtype=np.int64)
        wait(self.comm.Iallgather(np.array([data.size], dtype=np.int64), sizes))
        displs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        wait(self.comm.Iallgatherv(data, [out, sizes.tolist(), displs.tolist(), MPI.BYTE]))
        return [pickle.loads(out[d:d + n].tobytes()) for d, n in zip(displs, sizes)]

    def _pallreduce(self, obj, op=MPI.SUM):
        fn = _py_op(op)
        if fn is None:                       # a user-defined MPI.Op: mpi4py's own path
            return self.comm.allreduce(obj, op=op)
        return functools.reduce(fn, self._pallgather(obj))

    def _pbcast(self, obj, root: int = 0):
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self.rank == root else b""
        n = np.array([len(data)], dtype=np.int64)
        wait(self.comm.Ibcast(n, root=root))
        buf = np.frombuffer(data, dtype=np.uint8).copy() if self.rank == root else np.empty(int(n[0]), np.uint8)
        wait(self.comm.Ibcast(buf, root=root))
        return obj if self.rank == root else pickle.loads(buf.tobytes())

    def _pgather(self, obj, root: int = 0):
        out = self._pallgather(obj)
        return out if self.rank == root else None

    def _psendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag) -> None:
        reqs = [self.comm.Irecv(recvbuf, source, recvtag), self.comm.Isend(sendbuf, dest, sendtag)]
        waitall(reqs)

    def free(self) -> None:
        """Release the communicators derived from the team (:meth:`derived`, newest first) and
        the team's own (not for the world team). Collective."""
        for obj in reversed(list(self._derived.values())):
            _free_derived(obj)
        self._derived.clear()
        if self.comm not in (MPI.COMM_WORLD, MPI.COMM_SELF) and self.comm != MPI.COMM_NULL:
            self.comm.Free()


_MISSING = object()
# every object made by Team.derived and not yet freed, oldest first (the same order on every rank:
# making one is collective); freed newest first at exit, teams that are gone by then included
_DERIVED: list = []


def _free_derived(obj) -> None:
    """Free one object made by :meth:`Team.derived` (an MPI communicator or anything with
    ``free()``) and forget it. Collective."""
    for i, o in enumerate(_DERIVED):
        if o is obj:
            del _DERIVED[i]
            break
    if isinstance(obj, MPI.Comm):
        if obj != MPI.COMM_NULL:
            obj.Free()
    else:
        obj.free()


@atexit.register
def _free_derived_at_exit() -> None:
    # Registered when this module is imported, i.e. before pgas.memory registers its own exit
    # handler (pgas imports the runtime first), so it runs after that one (atexit runs handlers
    # last-in first-out): the windows made on a node communicator are gone before it is freed;
    # and mpi4py finalises MPI after every handler registered after its import.
    if MPI.Is_finalized():
        _DERIVED.clear()
        return
    while _DERIVED:
        _free_derived(_DERIVED[-1])


class ProcessGrid(Team):
    """A team arranged as a Cartesian grid (``MPI_Cart_create`` without reordering). Creating one
    (``Team.grid``) is collective.

    Rank ``r`` sits at the row-major coordinates of ``r`` in ``dims``, so ``coords_of`` and
    ``rank_of`` are pure arithmetic and agree with MPI's Cartesian topology.
    """

    def __init__(self, comm: MPI.Cartcomm, parent: Team | None = None):
        super().__init__(comm, parent)
        self.dims: tuple[int, ...] = tuple(comm.Get_topo()[0])
        self.periods: tuple[bool, ...] = tuple(bool(p) for p in comm.Get_topo()[1])
        self.coords: tuple[int, ...] = tuple(comm.Get_coords(self.rank))
        self.ndim = len(self.dims)

    def __repr__(self) -> str:
        return f"ProcessGrid(dims={self.dims}, coords={self.coords}, rank={self.rank})"

    def coords_of(self, rank: int) -> tuple[int, ...]:
        """Grid coordinates of ``rank``. Local."""
        if not 0 <= rank < self.size:
            raise IndexError(f"rank {rank} is outside a grid of {self.size} ranks")
        out = []
        for d in reversed(self.dims):
            rank, c = divmod(rank, d)
            out.append(c)
        return tuple(reversed(out))

    def rank_of(self, coords: Sequence[int]) -> int:
        """Rank at grid coordinates ``coords`` (wrapped along periodic dimensions). Local."""
        if len(coords) != self.ndim:
            raise ValueError(f"rank_of: need {self.ndim} coordinates, got {len(coords)}")
        r = 0
        for c, d, p in zip(coords, self.dims, self.periods):
            if p:
                c %= d
            elif not 0 <= c < d:
                raise IndexError(f"coordinates {tuple(coords)} are outside the grid {self.dims}")
            r = r * d + c
        return r

    def shift(self, axis: int, disp: int = 1) -> tuple[int, int]:
        """``(source, dest)`` ranks for a shift by ``disp`` along ``axis`` (``MPI.PROC_NULL`` at an
        open edge). Local."""
        return self.comm.Shift(axis, disp)

    def sub(self, remain: Sequence[bool]) -> "ProcessGrid":
        """The sub-grid keeping the dimensions where ``remain`` is true (rows, columns). Collective."""
        if len(remain) != self.ndim:
            raise ValueError(f"sub: remain has {len(remain)} entries for a {self.ndim}-D grid")
        return ProcessGrid(self.comm.Sub([bool(x) for x in remain]), parent=self)


def grid_shape(size: int, dims: int | Sequence[int]) -> tuple[int, ...]:
    """Complete a process-grid shape for ``size`` ranks (zeros are chosen by ``MPI.Compute_dims``).

    Local and deterministic, so every rank computes (and validates) the same shape.
    """
    if isinstance(dims, bool) or not isinstance(dims, (int, Sequence)):
        raise ValueError(f"grid: dims must be an int or a sequence of ints, got {dims!r}")
    if isinstance(dims, int):
        if dims < 1:
            raise ValueError(f"grid: the number of dimensions must be >= 1, got {dims}")
        return tuple(MPI.Compute_dims(size, dims))
    dims = list(dims)
    if not dims or any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in dims):
        raise ValueError(f"grid: extents must be non-negative integers (0 = choose), got {dims}")
    fixed = math.prod(d for d in dims if d > 0)
    if size % fixed != 0 or (0 not in dims and fixed != size):
        raise ValueError(f"grid: a {'x'.join(str(d) if d else '?' for d in dims)} process grid "
                         f"cannot hold {size} ranks")
    return tuple(MPI.Compute_dims(size, dims))


def _wait(request) -> None:
    wait(request)


def _blocking(start):
    """A blocking collective made of its non-blocking start and a polite wait."""
    def call(*args, **kwargs):
        wait(start(*args, **kwargs))
    return call


def _nbytes(buf) -> int:
    """Bytes in an mpi4py buffer spec (array, or [array, ...]); 0 when unknown."""
    if isinstance(buf, (list, tuple)) and buf:
        buf = buf[0]
    return int(getattr(buf, "nbytes", 0))

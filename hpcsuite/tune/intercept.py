"""Tuning a plain mpi4py code: a communicator proxy whose calls the tuner sees.

``intercept(comm)`` returns a communicator on the same MPI handle as ``comm``, of a subclass of
``comm``'s own class (``Intracomm``, ``Cartcomm``, ...; so ``isinstance`` checks and calls that take
a communicator, such as ``MPI.Win.Create`` or h5py's ``comm=``, work with it), whose communication
methods go through :func:`hpcsuite.runtime.comm_hooks.observed`, the same observation point as
every :class:`~hpcsuite.runtime.Team` call: inside an :class:`~hpcsuite.tune.Execution` they are
timed, carry the execution path and the kernel statistics, and (buffer collectives, ``Sendrecv``)
may be skipped. Outside an execution a call costs one extra Python call. Communicators derived
from it (``Dup``, ``Split``, ``Create_cart``, ``Sub``, ...) are intercepted too. A user's code
that takes the communicator as an argument runs unchanged::

    from hpcsuite import tune
    comm = tune.intercept(MPI.COMM_WORLD)
    with tune.Execution(model, "selective"):
        jacobi(comm, ...)                 # the user's own mpi4py code

and code that reads ``MPI.COMM_WORLD`` itself runs unchanged inside :func:`intercept_world`,
which makes ``mpi4py.MPI.COMM_WORLD`` such a communicator until the context exits (code that bound
``COMM_WORLD`` to another name before, e.g. ``from mpi4py.MPI import COMM_WORLD`` at import time,
keeps the plain one)::

    with tune.intercept_world(), tune.blas(), tune.Execution(model, "selective"):
        summa(...)                        # reads MPI.COMM_WORLD, splits it, calls np.dot

Computation is seen where the code marks it (``hpcsuite.runtime.compute`` or the ``kernel``
decorator) and, inside :func:`hpcsuite.tune.blas`, in NumPy/SciPy BLAS and LAPACK calls; other
NumPy calls count as the time between kernels (charged, never skipped).

Limits (what carries the path and what may be skipped):

* blocking buffer collectives (``Bcast``, ``Allreduce``, ``Allgather(v)``, ``Alltoall(v/w)``,
  ``Reduce``, ``Barrier``): path and statistics merged, skipped when every participant is steady;
  ``Gather(v)``, ``Scatter(v)``, ``Scan``, ``Exscan``, ``Reduce_scatter(_block)`` and the
  lower-case (pickle) collectives: merged, never skipped (their results may steer control flow);
* ``Sendrecv`` with explicit ``dest`` and ``source``: the path goes ahead on its own tag, the
  receiver follows the sender's skip decision (as for ``Team.Sendrecv``);
* ``Send``/``Recv``/``Isend``/``Irecv`` and the other point-to-point calls, ``Sendrecv`` from
  ``ANY_SOURCE``: timed as kernels, never skipped, and no path travels with them (a receive from
  ``ANY_SOURCE`` cannot be matched to the sender's path message); a code whose critical path runs
  through plain sends is predicted from each rank's own time;
* non-blocking collectives (``Iallreduce``, ...): the path is merged when they start and only the
  start is timed; their completion (``Request.Wait``) is not seen;
* one-sided ``Win`` operations and communicators created without the proxy are not seen.
"""
from __future__ import annotations

import contextlib

from mpi4py import MPI

from ..runtime import Team
from ..runtime.comm_hooks import current_interceptor, observed

__all__ = ["intercept", "intercept_world", "InterceptedComm"]

# methods passed through the observation point (everything else is the communicator's own)
_COMM = {"Barrier", "Bcast", "Allreduce", "Allgather", "Allgatherv", "Alltoall", "Alltoallv",
         "Alltoallw", "Reduce", "Gather", "Gatherv", "Scatter", "Scatterv", "Scan", "Exscan",
         "Reduce_scatter", "Reduce_scatter_block",
         "barrier", "bcast", "allreduce", "allgather", "alltoall", "reduce", "gather", "scatter",
         "scan", "exscan",
         "Ibarrier", "Ibcast", "Iallreduce", "Iallgather", "Iallgatherv", "Ialltoall", "Ialltoallv",
         "Ireduce", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iscan", "Iexscan",
         "Send", "Ssend", "Bsend", "Rsend", "Recv", "Isend", "Issend", "Irecv", "Mrecv",
         "send", "ssend", "recv", "isend", "issend", "irecv", "sendrecv", "Sendrecv_replace"}
# methods that return a derived communicator
_DERIVED = {"Dup", "Dup_with_info", "Split", "Split_type", "Create", "Create_group", "Create_cart",
            "Create_graph", "Create_dist_graph", "Create_dist_graph_adjacent", "Sub", "Clone", "Idup",
            "Merge", "Create_intercomm"}
# the receive buffer is the second argument (the first may be MPI.IN_PLACE)
_SECOND = {"Allreduce", "Reduce", "Allgather", "Allgatherv", "Gather", "Gatherv"}


def _nbytes(x) -> int:
    if x is None or x is MPI.IN_PLACE:
        return 0
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return int(getattr(x, "nbytes", 0) or 0)


class InterceptedComm:
    """The base of every intercepted communicator (see the module notes): ``isinstance(c,
    InterceptedComm)`` tells one. Made by :func:`intercept`, not directly.

    ``comm`` is a plain communicator object on the same handle (what the tuner's own messages
    use); every attribute not listed in the module notes is the communicator's own.
    """

    def __init__(self, comm):
        self.comm = comm

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=MPI.ANY_SOURCE, recvtag=MPI.ANY_TAG,
                 status=None):
        """``MPI.Comm.Sendrecv``; with explicit ``dest`` and ``source`` the path travels with it."""
        if current_interceptor() is None:
            return self.comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        if source == MPI.ANY_SOURCE or status is not None or recvbuf is None:
            return observed(self, "Sendrecv_any", _nbytes(sendbuf), self.comm.Sendrecv, sendbuf, dest, sendtag,
                            recvbuf, source, recvtag, status)
        return observed(self, "Sendrecv", _nbytes(sendbuf), self.comm.Sendrecv, sendbuf, dest, sendtag,
                        recvbuf, source, recvtag)

    def __repr__(self) -> str:
        return f"intercept({self.comm!r})"


def _observed_method(name: str):
    second = name in _SECOND

    def method(self, *args, **kwargs):
        fn = getattr(self.comm, name)
        if current_interceptor() is None:
            return fn(*args, **kwargs)
        buf = args[1] if second and len(args) > 1 else args[0] if args else \
            kwargs.get("recvbuf" if second else "sendbuf", kwargs.get("buf"))
        out = observed(self, name, _nbytes(buf), fn, *args, **kwargs)
        if out is None and name[0] == "I":
            return MPI.REQUEST_NULL          # a skipped non-blocking call: nothing to wait for
        return out
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``MPI.Comm.{name}``, seen by the tuner."
    return method


def _derived_method(name: str):
    def method(self, *args, **kwargs):
        out = getattr(self.comm, name)(*args, **kwargs)
        if isinstance(out, tuple):                         # Idup: (communicator, request)
            return (_wrap(out[0]), *out[1:])
        return _wrap(out)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``MPI.Comm.{name}``; the new communicator is intercepted too."
    return method


for _name in _COMM:
    setattr(InterceptedComm, _name, _observed_method(_name))
for _name in _DERIVED:
    setattr(InterceptedComm, _name, _derived_method(_name))

_CLASSES: dict = {}


def _wrap(comm):
    if not isinstance(comm, MPI.Comm) or isinstance(comm, InterceptedComm) or comm == MPI.COMM_NULL:
        return comm
    base = type(comm)
    cls = _CLASSES.get(base)
    if cls is None:
        cls = _CLASSES[base] = type(f"Intercepted{base.__name__}", (InterceptedComm, base),
                                    {"__module__": __name__, "__doc__": InterceptedComm.__doc__})
    return cls(comm)


def intercept(comm) -> InterceptedComm:
    """The communicator ``comm`` with its communication visible to the tuner (see the module
    notes for what carries the path); ``comm`` itself if it is intercepted already. Local.

    Raises ``TypeError`` when ``comm`` is not an mpi4py communicator."""
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"intercept: expected an mpi4py communicator, got {type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise ValueError("intercept: got MPI.COMM_NULL")
    return _wrap(comm)


@contextlib.contextmanager
def intercept_world():
    """A context in which ``mpi4py.MPI.COMM_WORLD`` is :func:`intercept` ``(MPI.COMM_WORLD)`` (and
    so every communicator derived from it), so that a plain mpi4py code is tuned with no change to
    its body; the plain one is restored when it exits. Local (no communication); nested contexts
    keep the outer one. Yields the intercepted world communicator."""
    world = MPI.COMM_WORLD
    if isinstance(world, InterceptedComm):
        yield world
        return
    # the world team is made once and kept (runtime.Team.world); made here first, inside, it
    # would keep the intercepted communicator after the context exits: make it now (local)
    Team.world()
    MPI.COMM_WORLD = seen = intercept(world)
    try:
        yield seen
    finally:
        MPI.COMM_WORLD = world

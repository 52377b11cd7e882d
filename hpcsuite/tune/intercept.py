"""Tuning a plain mpi4py code: a communicator proxy whose calls the tuner sees.

``intercept(comm)`` returns an object with the methods of the mpi4py communicator ``comm``; the
communication calls among them go through :func:`hpcsuite.runtime.comm_hooks.observed`, the same
observation point as every :class:`~hpcsuite.runtime.Team` call, so that inside an
:class:`~hpcsuite.tune.Execution` they are timed, carry the execution path and the kernel
statistics, and (buffer collectives, ``Sendrecv``) may be skipped. Outside an execution a call costs
one extra Python call. Communicators derived from the proxy (``Dup``, ``Split``, ``Create_cart``,
``Sub``, ...) are proxies too. A user's code takes the communicator as an argument and runs
unchanged::

    from hpcsuite import tune
    comm = tune.intercept(MPI.COMM_WORLD)
    with tune.Execution(model, "selective", comm=MPI.COMM_WORLD):
        jacobi(comm, ...)                 # the user's own mpi4py code

Computation is seen where the code marks it (``hpcsuite.runtime.compute`` or the ``kernel``
decorator); NumPy calls that are not marked count as the time between kernels (charged, never
skipped).

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

from mpi4py import MPI

from ..runtime.comm_hooks import observed

__all__ = ["intercept", "InterceptedComm"]

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
_DERIVED = {"Dup", "Split", "Split_type", "Create", "Create_group", "Create_cart", "Create_graph",
            "Create_dist_graph", "Create_dist_graph_adjacent", "Sub", "Clone", "Idup"}


def _nbytes(x) -> int:
    if x is None or x is MPI.IN_PLACE:
        return 0
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return int(getattr(x, "nbytes", 0) or 0)


class InterceptedComm:
    """A proxy of an mpi4py communicator (see the module notes). Local to construct.

    Attributes ``comm`` (the communicator itself) and ``size`` are what the tuner reads; every
    other attribute is the communicator's.
    """

    def __init__(self, comm):
        if isinstance(comm, InterceptedComm):
            comm = comm.comm
        if not isinstance(comm, MPI.Comm):
            raise TypeError(f"intercept: expected an mpi4py communicator, got {type(comm).__name__}")
        self.comm = comm
        self.size = comm.Get_size()

    def __getattr__(self, name):
        attr = getattr(self.comm, name)
        if name in _DERIVED:
            def derived(*args, **kwargs):
                out = attr(*args, **kwargs)
                return InterceptedComm(out) if isinstance(out, MPI.Comm) and out != MPI.COMM_NULL else out
            return derived
        if name not in _COMM:
            return attr

        def call(*args, **kwargs):
            nb = _nbytes(args[1] if name in ("Allreduce", "Reduce", "Allgather", "Allgatherv", "Gather",
                                               "Gatherv") and len(args) > 1 else args[0] if args else None)
            out = observed(self, name, nb, attr, *args, **kwargs)
            if out is None and name[0] == "I":
                return MPI.REQUEST_NULL          # a skipped non-blocking call: nothing to wait for
            return out
        return call

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=MPI.ANY_SOURCE, recvtag=MPI.ANY_TAG,
                 status=None):
        """``MPI.Comm.Sendrecv``; with explicit ``dest`` and ``source`` the path travels with it."""
        if source == MPI.ANY_SOURCE or status is not None or recvbuf is None:
            return observed(self, "Sendrecv_any", _nbytes(sendbuf), self.comm.Sendrecv, sendbuf, dest, sendtag,
                            recvbuf, source, recvtag, status)
        return observed(self, "Sendrecv", _nbytes(sendbuf), self.comm.Sendrecv, sendbuf, dest, sendtag,
                        recvbuf, source, recvtag)

    def __eq__(self, other):
        return self.comm == (other.comm if isinstance(other, InterceptedComm) else other)

    def __hash__(self):
        return hash(self.comm)

    def __repr__(self) -> str:
        return f"intercept({self.comm!r})"


def intercept(comm) -> InterceptedComm:
    """The communicator ``comm`` with its communication visible to the tuner (see the module
    notes for what carries the path). Local."""
    return InterceptedComm(comm)

"""A 1-D Jacobi iteration written only with mpi4py and NumPy, as a user would write it: nothing of
hpcsuite in its body. The tuner sees its communication when it is handed ``tune.intercept(comm)``."""
import numpy as np
from mpi4py import MPI


def jacobi(comm, n_local: int, steps: int, chunk: int = 1) -> np.ndarray:
    """``steps`` sweeps of ``u = (u[i-1] + u[i+1]) / 2`` on ``n_local`` points per rank (fixed ends
    0 and 1), halos by ``Sendrecv``, a residual ``Allreduce`` every ``chunk`` sweeps. Returns the
    local points."""
    rank, size = comm.Get_rank(), comm.Get_size()
    left = rank - 1 if rank > 0 else MPI.PROC_NULL
    right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    u = np.zeros(n_local + 2)
    if rank == size - 1:
        u[-1] = 1.0
    res = np.zeros(1)
    for it in range(steps):
        comm.Sendrecv(u[1:2], dest=left, recvbuf=u[-1:], source=right)
        comm.Sendrecv(u[-2:-1], dest=right, recvbuf=u[:1], source=left)
        new = 0.5 * (u[:-2] + u[2:])
        res[0] = float(np.abs(new - u[1:-1]).max())
        u[1:-1] = new
        if (it + 1) % chunk == 0:
            comm.Allreduce(MPI.IN_PLACE, res, op=MPI.MAX)
    return u[1:-1].copy()

"""Random single-element updates (GUPS-style): pgas.Atomic.fetch_add vs raw MPI Fetch_and_op.

Run: mpiexec -n 2 .venv/bin/python bench/pgas_gups.py

Every rank adds 1 to random elements of a distributed int64 table (2**16 elements per rank),
each update a Fetch_and_op + Flush to the owner. Raw: MPI.Win.Allocate + Lock_all, owner and
displacement computed by hand for a BLOCKED table. hpcsuite: ``pgas.Atomic(a, i).fetch_add(1)``
(the Atomic handle built per update, as user code would), and ``pgas.accumulate(a, indices, 1)``
(the batch grouped by owner: one MPI_Accumulate with an indexed type per owner). All tables end with
exactly ``updates * ranks * repetitions`` (checked). Prints updates per second per rank and ratios.
"""
import numpy as np
from mpi4py import MPI

from common import COMM, Table, timeit
from hpcsuite import pgas

rank, P = COMM.Get_rank(), COMM.Get_size()
per_rank = 2**16
n = per_rank * P
updates = 2000
idx = np.random.default_rng(rank).integers(0, n, size=updates)

win = MPI.Win.Allocate(per_rank * 8, 8, comm=COMM)
raw = np.frombuffer(win.tomemory(), dtype=np.int64)
raw[:] = 0
win.Lock_all(MPI.MODE_NOCHECK)
one, old = np.ones(1, np.int64), np.empty(1, np.int64)


def raw_updates():
    for g in idx:
        owner, disp = divmod(int(g), per_rank)
        win.Fetch_and_op(one, old, owner, disp, MPI.SUM)
        win.Flush(owner)


a = pgas.zeros(n, dtype=np.int64)


def our_updates():
    for g in idx:
        pgas.Atomic(a, int(g)).fetch_add(1)


b = pgas.zeros(n, dtype=np.int64)


def our_batched():
    pgas.accumulate(b, idx, 1)


reps = 5
t_raw = timeit(raw_updates, repeat=reps, warmup=0)
t_pg = timeit(our_updates, repeat=reps, warmup=0)
t_b = timeit(our_batched, repeat=reps, warmup=0)
COMM.Barrier()
win.Sync()
total_raw = COMM.allreduce(int(raw.sum()))
total_pg = pgas.reduce(a, "sum")
total_b = pgas.reduce(b, "sum")
assert total_raw == total_pg == total_b == updates * P * reps, (total_raw, total_pg, total_b)
tab = Table("random atomic increments of a distributed int64 table (median of 5)",
            ["updates/rank", "raw Fetch_and_op upd/s", "pgas.Atomic upd/s", "ratio Atomic/raw",
             "pgas.accumulate upd/s", "ratio accumulate/raw"])
tab.add(updates, updates / t_raw, updates / t_pg, t_raw / t_pg, updates / t_b, t_raw / t_b)
tab.show()
win.Unlock_all()
win.Free()
a.free()

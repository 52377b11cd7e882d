"""Bulk one-sided get/put: hpcsuite DistArray slices vs raw mpi4py Win.Get/Win.Put.

Run: mpiexec -n 2 .venv/bin/python bench/pgas_rma.py

Rank 0 reads and writes a contiguous block of N doubles that rank 1 owns, and a strided 2-D
sub-block (every other row of a column band). Raw: a window from MPI.Win.Allocate under Lock_all,
Get/Put + Flush (the subarray case with a Create_subarray target type). hpcsuite: ``x = a[sel]`` and
``a[sel] = x`` through MPI RMA (``shm=False``, as across nodes) and through the shared-memory path
(``shm=True``, the default for same-node peers). Reads use ``a.get(sel, out=buf)`` (a reused
buffer, as the raw code does); plain ``a[sel]`` also allocates and first-touches a new array.
Goal: RMA path >= 0.9x raw bandwidth for >= 1 MiB.
"""
import numpy as np
from mpi4py import MPI

from common import COMM, Table, timeit
from hpcsuite import pgas

rank, size = COMM.Get_rank(), COMM.Get_size()
assert size >= 2, "run with at least 2 ranks"


def raw_window(n):
    win = MPI.Win.Allocate(n * 8, 8, comm=COMM)
    buf = np.frombuffer(win.tomemory(), dtype=np.float64)
    buf[:] = rank
    win.Lock_all(MPI.MODE_NOCHECK)
    return win


tab = Table("bulk one-sided get/put, rank 0 <-> rank 1 (GB/s, median of 9)",
            ["MiB", "op", "raw mpi4py", "hpcsuite rma", "ratio rma/raw", "hpcsuite shm", "ratio shm/raw"])
for mib in (1, 4, 16, 64):
    n = mib * 2**20 // 8
    win = raw_window(n)
    arrays = {shm: pgas.zeros(n * size, shm=shm) for shm in (False, True)}
    for a in arrays.values():
        a.local[...] = rank
    local = np.empty(n)
    sel = slice(n, 2 * n)                       # exactly rank 1's block

    def raw_get():
        if rank == 0:
            win.Get(local, 1, (0, n, MPI.DOUBLE))
            win.Flush(1)

    def raw_put():
        if rank == 0:
            win.Put(local, 1, (0, n, MPI.DOUBLE))
            win.Flush(1)

    def our_get(a):
        # like-for-like with raw (which reuses its buffer): read into a reused array
        return (lambda: a.get(sel, out=local)) if rank == 0 else (lambda: None)

    def our_put(a):
        def f():
            if rank == 0:
                a[sel] = local
        return f

    for op, raw, ours in (("get", raw_get, our_get), ("put", raw_put, our_put)):
        t_raw = timeit(raw)
        t_rma = timeit(ours(arrays[False]))
        t_shm = timeit(ours(arrays[True]))
        gbs = lambda t: n * 8 / t / 1e9
        tab.add(mib, op, gbs(t_raw), gbs(t_rma), t_raw / t_rma, gbs(t_shm), t_raw / t_shm)
    for a in arrays.values():
        a.free()
    win.Unlock_all()
    win.Free()
tab.show()

# a strided 2-D selection: every other row, a band of columns, all owned by rank 1
tab2 = Table("strided 2-D get (every other row, 3/4 of the columns), GB/s",
             ["MiB moved", "raw subarray", "hpcsuite rma", "ratio rma/raw", "hpcsuite shm", "ratio shm/raw"])
for rows in (512, 2048):
    cols = 1024
    a = {shm: pgas.zeros((rows * size, cols), dist=(pgas.BLOCKED, pgas.NONE), shm=shm) for shm in (False, True)}
    win = raw_window(rows * cols)
    sub = [rows // 2, cols * 3 // 4]
    vec = MPI.DOUBLE.Create_vector(rows // 2, cols * 3 // 4, 2 * cols).Commit()
    out = np.empty(sub)

    def raw_strided():
        if rank == 0:
            win.Get(out, 1, (0, 1, vec))
            win.Flush(1)

    def ours(arr):
        return (lambda: arr.get((slice(rows, 2 * rows, 2), slice(0, cols * 3 // 4)), out=out)) \
            if rank == 0 else (lambda: None)

    t_raw, t_rma, t_shm = timeit(raw_strided), timeit(ours(a[False])), timeit(ours(a[True]))
    moved = out.nbytes
    tab2.add(moved / 2**20, moved / t_raw / 1e9, moved / t_rma / 1e9, t_raw / t_rma, moved / t_shm / 1e9, t_raw / t_shm)
    vec.Free()
    win.Unlock_all()
    win.Free()
    for x in a.values():
        x.free()
tab2.show()

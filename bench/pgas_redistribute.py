"""Redistribution: pgas.copy(src, dst) vs a hand-written MPI_Alltoallw with derived datatypes.

Run: mpiexec -n 2 .venv/bin/python bench/pgas_redistribute.py   (-n 4: oversubscribed)

Cases, each on an N x N float64 matrix:
  grid transpose   BLOCKED x BLOCKED on a P x 1 grid -> on a 1 x P grid (rows to columns); the raw
                   version uses one MPI subarray type per peer on each side.
  block-cyclic     BLOCKED rows -> BLOCKCYCLIC(64) rows; the raw version uses indexed types of
                   whole-row runs per peer.
Goal: hpcsuite at most 1.25x the raw time. Also prints the peak memory growth on rank 0 (not
counting peers' shared-memory pages mapped while reading them in place). With every rank on one
node ``pgas.copy`` reads the peers' windows directly; ``HPCSUITE_PGAS_SHM=0`` measures its
Alltoallw path (the one taken across nodes).
"""
import numpy as np
from mpi4py import MPI

from common import COMM, Table, timeit
from hpcsuite import pgas
from hpcsuite.runtime import block_range

rank, P = COMM.Get_rank(), COMM.Get_size()


def raw_transpose(n):
    r0, r1 = block_range(n, P, rank)
    c0, c1 = block_range(n, P, rank)
    src = np.random.default_rng(rank).standard_normal((r1 - r0, n))
    dst = np.empty((n, c1 - c0))
    stypes, rtypes = [], []
    for q in range(P):
        qc0, qc1 = block_range(n, P, q)
        qr0, qr1 = block_range(n, P, q)
        stypes.append(MPI.DOUBLE.Create_subarray(src.shape, [r1 - r0, qc1 - qc0], [0, qc0]).Commit())
        rtypes.append(MPI.DOUBLE.Create_subarray(dst.shape, [qr1 - qr0, c1 - c0], [qr0, 0]).Commit())
    ones, zeros = [1] * P, [0] * P

    def run():
        COMM.Alltoallw([src, ones, zeros, stypes], [dst, ones, zeros, rtypes])
    return run, stypes + rtypes


def raw_blockcyclic(n, b):
    r0, r1 = block_range(n, P, rank)
    src = np.random.default_rng(rank).standard_normal((r1 - r0, n))
    mine_cyc = [g for g in range(n) if (g // b) % P == rank]
    dst = np.empty((len(mine_cyc), n))
    stypes, rtypes = [], []
    rows = np.arange(r0, r1)
    for q in range(P):
        # rows of my block that q owns cyclically -> their local row numbers, in runs
        sel = np.flatnonzero((rows // b) % P == q)
        stypes.append(_rows_type(sel, n))
        qr0, qr1 = block_range(n, P, q)
        # rows q sends me: my cyclic rows inside q's block -> my local cyclic row numbers
        mine = np.array(mine_cyc, dtype=np.int64)
        rtypes.append(_rows_type(np.flatnonzero((mine >= qr0) & (mine < qr1)), n))
    ones, zeros = [1] * P, [0] * P

    def run():
        COMM.Alltoallw([src, ones, zeros, stypes], [dst, ones, zeros, rtypes])
    return run, stypes + rtypes


def _rows_type(local_rows, n):
    if len(local_rows) == 0:
        return MPI.DOUBLE.Create_contiguous(0).Commit()
    cuts = np.flatnonzero(np.diff(local_rows) != 1) + 1
    runs = np.split(local_rows, cuts)
    return MPI.DOUBLE.Create_indexed([len(r) * n for r in runs], [int(r[0]) * n for r in runs]).Commit()


def status_bytes(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":")) * 1024


def vm_hwm():
    return status_bytes("VmHWM")


tab = Table("redistribution of an N x N float64 matrix (median of 7)",
            ["case", "N", "raw Alltoallw ms", "pgas.copy ms", "ratio copy/raw", "peak growth / local part"])
for n in (1024, 2048, 4096):
    for case in ("grid transpose", "block-cyclic"):
        if case == "grid transpose":
            raw, types = raw_transpose(n)
            a = pgas.zeros((n, n), dist=(pgas.BLOCKED, pgas.BLOCKED), grid=(P, 1))
            b = pgas.zeros((n, n), dist=(pgas.BLOCKED, pgas.BLOCKED), grid=(1, P))
        else:
            raw, types = raw_blockcyclic(n, 64)
            a = pgas.zeros((n, n), dist=(pgas.BLOCKED, pgas.NONE))
            b = pgas.zeros((n, n), dist=(pgas.BLOCKCYCLIC(64), pgas.NONE))
        a.local[...] = 1.0
        b.local[...] = 0.0
        t_raw = timeit(raw, repeat=7)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base, shared = vm_hwm(), status_bytes("RssShmem")
        t_pg = timeit(lambda: pgas.copy(a, b), repeat=7)
        # peers' shared-memory pages read in place are mapped, not new memory: not counted
        growth = (vm_hwm() - base - (status_bytes("RssShmem") - shared)) / a.local.nbytes
        tab.add(case, n, t_raw * 1e3, t_pg * 1e3, t_pg / t_raw, growth)
        for t in types:
            t.Free()
        a.free()
        b.free()
tab.show()

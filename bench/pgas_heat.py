"""hpcsuite PGAS arrays vs Heat (helmholtz-analytics/heat) on the same data and ranks.

Needs the separate Heat environment (bench/setup_heat_env.sh, about 6 GB; not part of CI):
    mpiexec -n 4 .venv-heat/bin/python bench/pgas_heat.py

1. An elementwise + reduction pipeline, 5 rounds of ``s = (x * 2 + 1).sum()`` on a 4000 x 2000
   float64 array split along rows: Heat ``DNDarray`` ops vs ``pgas.transform`` into a preallocated
   array + ``pgas.reduce``, and vs the same with a new array per round (allocation included).
2. Redistribution of the same array from row blocks to column blocks: ``ht.resplit(x, 1)`` vs
   ``pgas.copy`` into a (NONE, BLOCKED) array.
Goal: hpcsuite at least 1.5x faster than Heat; the ratio is printed whatever it is.

Equal resources (issue 21, item 3): ``common`` limits hpcsuite's BLAS/OpenMP/numba threads to each
rank's share of the cores (``THREADS``); torch gets the same intra-op thread count, and one inter-op
thread, *before* Heat is imported (Heat imports torch, and torch fixes its pools on first use). The
thread counts are printed in the table's title. With more ranks than cores the ranks take turns on
the cores; such a run's ratio is printed as "oversubscribed", not as a speed-up.
"""
import os
import warnings

import numpy as np

from common import COMM, THREADS, Table, timeit

warnings.filterwarnings("ignore")
import torch  # noqa: E402

torch.set_num_threads(THREADS)               # the same threads per rank as hpcsuite's side
torch.set_num_interop_threads(1)
import heat as ht  # noqa: E402

from hpcsuite import pgas  # noqa: E402

OVERSUBSCRIBED = COMM.Get_size() > (os.cpu_count() or 1)

shape = (4000, 2000)
rounds = 5
xh = ht.random.randn(*shape, split=0, dtype=ht.float64)
xp = pgas.zeros(shape, dist=(pgas.BLOCKED, pgas.NONE))
xp.local[...] = xh.larray.numpy()          # the very same values on every rank
yp = pgas.empty(shape, dist=(pgas.BLOCKED, pgas.NONE))


def heat_pipeline():
    for _ in range(rounds):
        s = (xh * 2.0 + 1.0).sum().item()
    return s


def pgas_pipeline():
    for _ in range(rounds):
        pgas.transform(lambda v: v * 2.0 + 1.0, xp, out=yp)
        s = pgas.reduce(yp, "sum")
    return s


def pgas_pipeline_alloc():
    for _ in range(rounds):
        y = pgas.transform(lambda v: v * 2.0 + 1.0, xp)
        s = pgas.reduce(y, "sum")
        y.free()
    return s


assert np.isclose(heat_pipeline(), pgas_pipeline(), rtol=1e-10)
ratio = ("Heat time / hpcsuite time (OVERSUBSCRIBED: more ranks than cores, not a speed-up)"
         if OVERSUBSCRIBED else "speed-up over Heat")
tab = Table(f"Heat vs hpcsuite, {shape[0]} x {shape[1]} float64 (median of 7; {THREADS} thread(s) per rank on "
            f"both sides: torch {torch.get_num_threads()} intra-op / {torch.get_num_interop_threads()} inter-op; "
            f"{os.cpu_count()} cores)", ["workload", "Heat ms", "hpcsuite ms", ratio])
t_h = timeit(heat_pipeline, repeat=7)
t_p = timeit(pgas_pipeline, repeat=7)
t_pa = timeit(pgas_pipeline_alloc, repeat=7)
tab.add(f"{rounds}x (x*2+1).sum(), out= preallocated", t_h * 1e3, t_p * 1e3, t_h / t_p)
tab.add(f"{rounds}x (x*2+1).sum(), new array each round", t_h * 1e3, t_pa * 1e3, t_h / t_pa)

xc = pgas.empty(shape, dist=(pgas.NONE, pgas.BLOCKED))
pgas.copy(xp, xc)
assert np.array_equal(ht.resplit(xh, 1).larray.numpy(), xc.local)
t_h = timeit(lambda: ht.resplit(xh, 1), repeat=7)
t_p = timeit(lambda: pgas.copy(xp, xc), repeat=7)
tab.add("row blocks -> column blocks (resplit / copy)", t_h * 1e3, t_p * 1e3, t_h / t_p)
tab.show()

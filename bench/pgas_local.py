"""Elementwise work on a DistArray's local view vs NumPy on an identical block.

Run: mpiexec -n 2 .venv/bin/python bench/pgas_local.py

``a.local`` is a NumPy array over the window memory, so the same in-place ufunc pipeline runs on
both; the ratio shows what (if anything) the shared-memory window costs. Goal: >= 0.95x NumPy.
"""
import numpy as np

from common import COMM, Table, timeit_local
from hpcsuite import pgas

tab = Table("elementwise y = 2.5 * x + 1 then sqrt(|y|), in place on the local block (median of 15)",
            ["elements/rank", "numpy ms", "a.local ms", "ratio numpy/a.local"])
for n in (2**16, 2**20, 2**23):
    a = pgas.zeros(n * COMM.Get_size())
    ref = np.zeros(n)
    for x in (a.local, ref):
        x[...] = np.linspace(0, 1, x.size)

    def work(x):
        def f():
            np.multiply(x, 2.5, out=x)
            np.add(x, 1.0, out=x)
            np.abs(x, out=x)
            np.sqrt(x, out=x)
        return f

    t_np = timeit_local(work(ref), repeat=15)
    t_pg = timeit_local(work(a.local), repeat=15)
    tab.add(n, t_np * 1e3, t_pg * 1e3, t_np / t_pg)
    a.free()
tab.show()

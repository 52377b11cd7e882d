"""Pattern queries at 4 and at 100,000 units: the cost per call must not grow with the units.

Run: .venv/bin/python bench/pgas_pattern.py   (no MPI ranks needed: patterns are simulated)
"""
import time

import numpy as np

from common import Table
from hpcsuite.pgas import BLOCKCYCLIC, BLOCKED, CYCLIC, Pattern

tab = Table("Pattern.local_index + global_index round trip, 10^6 + 7 elements (median of 5 x 20,000 calls)",
            ["dist", "us/call at 4 units", "us/call at 100,000 units", "ratio"])
rng = np.random.default_rng(0)
gs = [int(g) for g in rng.integers(0, 10**6 + 7, size=20000)]
for spec in (BLOCKED, CYCLIC, BLOCKCYCLIC(7)):
    per = {}
    for units in (4, 100_000):
        p = Pattern(10**6 + 7, spec, team=units)
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for g in gs:
                u, l = p.local_index(g)
                p.global_index(u, l)
            samples.append((time.perf_counter() - t0) / len(gs))
        per[units] = sorted(samples)[2] * 1e6
    tab.add(repr(spec), per[4], per[100_000], per[100_000] / per[4])
tab.show()

"""Example 9: redistribution and one-sided access on PGAS arrays.

Shows: ``pgas.copy`` between two distributions (row blocks -> 2-D block-cyclic tiles on a process
grid: one ``MPI_Alltoallw``, no gather); one-sided reads and writes of any global slice from any
rank (``a[i, j:k]``: the owners do not take part); an atomic counter (``pgas.Atomic``) that every
rank increments; ``sync`` to complete the puts. Checked against the same operations in NumPy.

Launch:  mpiexec -n 2 python examples/09_redistribute_rma.py
"""
import numpy as np

from hpcsuite import pgas
from hpcsuite.runtime import Team, install_abort_hook

install_abort_hook()
team = Team.world()
m, n = 60, 40
ref = np.arange(m * n, dtype=float).reshape(m, n)        # what every rank can compute

rows = pgas.zeros((m, n), dist=(pgas.BLOCKED, pgas.NONE), team=team)      # row blocks
rows.local[...] = ref[rows.local_indices[0]]             # fill my block (owner computes)
tiles = pgas.zeros((m, n), dist=(pgas.BLOCKCYCLIC(8), pgas.BLOCKCYCLIC(8)), grid=(0, 0), team=team)
pgas.copy(rows, tiles)                                    # collective redistribution

# one-sided: every rank reads a slice owned by others, and writes one row of its choice
far = tiles[m - 1 - team.rank, 5:25]                      # a NumPy array, read from the owners
tiles[team.rank * 7, :] = -1.0 - team.rank                # a remote write, done when it returns
counter = pgas.zeros((1,), dtype=np.int64, team=team)
before = pgas.Atomic(counter, 0).fetch_add(1)             # one-sided atomic
tiles.sync()                                              # collective: all puts complete

# --- check
expect = ref.copy()
for r in range(team.size):
    expect[r * 7, :] = -1.0 - r
whole = tiles.to_numpy(root=0)                            # collective gather
ok = np.array_equal(far, ref[m - 1 - team.rank, 5:25]) and 0 <= before < team.size
ok = all(team.allgather(bool(ok)))                       # every rank's checks
total = counter.to_numpy(root=0)
if team.rank == 0:
    ok = ok and np.array_equal(whole, expect) and total[0] == team.size
    print(f"redistribution + RMA on {team.size} ranks: tiles equal NumPy, one-sided reads and "
          f"writes, atomic counter = {total[0]}: {ok}")
    print("VERIFIED" if ok else "FAILED")
for a in (rows, tiles, counter):
    a.free()

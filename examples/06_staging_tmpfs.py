"""Example 6: job-temporary staging in RAM inside your own job (tmpfs backend).

Shows: a ``TmpfsStore`` (node-local /dev/shm; no daemons, nothing to deploy) holding a job's
intermediate data: the input tree is staged in with every rank copying its share, each rank keeps
its intermediate arrays there between two phases (checksummed, atomic writes), and the results are
staged out to a folder with checksums verified. All ranks here are on one node; on several nodes
each node has its own tmpfs (use ``hpcsuite stage up --backend cephfs|rados`` for one store across
nodes). Checked: every staged-out file equals what NumPy computes from the inputs.

Launch:  mpiexec -n 2 python examples/06_staging_tmpfs.py
"""
import io
import shutil
import tempfile
from pathlib import Path

import numpy as np

from hpcsuite.runtime import Team, install_abort_hook
from hpcsuite.staging import TmpfsStore, stage_in, stage_out

install_abort_hook()
team = Team.world()
work = Path(team.bcast(tempfile.mkdtemp(prefix="hpcsuite-example-") if team.rank == 0 else None))
shm = team.bcast(tempfile.mkdtemp(prefix="hpcsuite-example-", dir="/dev/shm") if team.rank == 0 else None)
if team.rank == 0:                                   # some input files
    (work / "in").mkdir()
    for i in range(4):
        np.save(work / "in" / f"part{i}.npy", np.arange(1000.0) * (i + 1))
team.barrier()

# --- stage
store = TmpfsStore(shm)                              # every rank: its own client of the store
names = stage_in(store, work / "in", team, name="inputs")          # collective
mine = [n for i, n in enumerate(sorted(names)) if i % team.size == team.rank]
for n in mine:                                       # phase 1: read inputs, keep intermediates
    a = np.load(io.BytesIO(store.get_bytes(n)))   # the staged .npy file, checksum verified
    store.put_array(f"tmp/{Path(n).stem}", np.cumsum(a))
for n in mine:                                       # phase 2: intermediates -> results
    b = store.get_array(f"tmp/{Path(n).stem}")       # checksum verified on the way out
    store.put_array(f"results/{Path(n).stem}.npy", b / b[-1])
team.barrier()
out = stage_out(store, "results", work / "out", team)                # collective, verified
# --- check

ok = True
if team.rank == 0:
    for i in range(4):
        got = np.load(next(p for p in out if p.name.startswith(f"part{i}")), allow_pickle=False)
        ref = np.cumsum(np.arange(1000.0) * (i + 1))
        ok &= np.allclose(got, ref / ref[-1], rtol=1e-15, atol=0)
    print(f"staging on {team.size} ranks: {len(names)} inputs in, {len(out)} results out; "
          f"results match NumPy: {ok}")
    print("VERIFIED" if ok and len(out) == 4 else "FAILED")
team.barrier()
if team.rank == 0:
    shutil.rmtree(work)
    shutil.rmtree(shm)

"""Example 8: checkpoint/restart of your own state on SIGUSR1.

Shows: ``CheckpointRequest`` in a plain MPI program. SLURM sends SIGUSR1 before the time limit
(the job templates ask for ``--signal=B:USR1@120``); the flag is agreed on collectively, so every
rank writes the state at the same step (here a distributed array to parallel HDF5 plus the step
number) and the program exits with ``EXIT_CHECKPOINTED`` (85), on which the job script requeues the
job. The next run finds the checkpoint and continues. The update is chaotic (logistic map), so only
a bit-exact restart reproduces the uninterrupted result, which rank 0 recomputes with NumPy.

Launch:  mpiexec -n 2 python examples/08_checkpoint_restart.py --dir DIR --signal-at 7   (exit 85)
         mpiexec -n 2 python examples/08_checkpoint_restart.py --dir DIR                 (finishes)
(--signal-at N: rank 0 sends itself SIGUSR1 at step N, standing in for SLURM.)
"""
import argparse
import os
import signal
import sys

import numpy as np

from hpcsuite import pgas
from hpcsuite.runtime import EXIT_CHECKPOINTED, CheckpointRequest, Team, install_abort_hook

install_abort_hook()
p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--signal-at", type=int, default=None)
opts = p.parse_args()
team = Team.world()
n, steps = 1000, 20
ck = os.path.join(opts.dir, "state.h5")


def initial(i):
    return 0.1 + 0.8 * (np.sin(i) ** 2)


if os.path.exists(ck):
    u = pgas.load_hdf5(ck, "u", team=team)                 # collective
    start = team.bcast(int(np.load(os.path.join(opts.dir, "step.npy"))) if team.rank == 0 else None)
    if team.rank == 0:
        print(f"restarting at step {start}")
else:
    u, start = pgas.zeros((n,), team=team), 0
    u.local[...] = initial(u.local_indices[0])
req = CheckpointRequest(team, start=start)                 # installs the SIGUSR1 handler
for step in range(start, steps):
    u.local[...] = 3.7 * u.local * (1 - u.local)            # your own update
    if opts.signal_at == step and team.rank == 0:
        os.kill(os.getpid(), signal.SIGUSR1)               # what SLURM would do
    if step + 1 < steps and req.due(step):                 # collective agreement
        os.makedirs(opts.dir, exist_ok=True)
        pgas.save_hdf5(u, ck, "u")                         # collective
        if team.rank == 0:
            np.save(os.path.join(opts.dir, "step.npy"), step + 1)
            print(f"checkpointed at step {step + 1}; exiting {EXIT_CHECKPOINTED}")
        u.free()
        sys.exit(EXIT_CHECKPOINTED)

# --- check
final = u.to_numpy(root=0)                                 # collective gather
if team.rank == 0:
    ref = initial(np.arange(n, dtype=float))
    for _ in range(steps):
        ref = 3.7 * ref * (1 - ref)
    same = np.array_equal(final, ref)
    print(f"checkpoint/restart on {team.size} ranks: {steps} steps, started at {start}; "
          f"bit-identical to the uninterrupted run: {same}")
    print("VERIFIED" if same else "FAILED")
u.free()

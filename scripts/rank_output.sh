#!/bin/sh
# Launcher wrapper for MPI test runs: rank 0 writes to the console, every other rank to
# $1/rank<N>.log (so the console holds one readable pytest summary). Usage:
#   mpiexec -n 4 scripts/rank_output.sh LOGDIR python -m pytest ...
# The rank comes from the launcher's environment, in the order of hpcsuite.runtime.launcher.RANK_VARS
# (MPICH's Hydra, Open MPI, any PMIx launcher, SLURM's srun); it is exported as HPCSUITE_TEST_RANK
# (scripts/run_tests.sh names each rank's JUnit report with it).
logdir=$1; shift
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}}
export HPCSUITE_TEST_RANK="$rank"
mkdir -p "$logdir"
if [ "$rank" = 0 ]; then
  exec "$@"
else
  exec "$@" > "$logdir/rank$rank.log" 2>&1
fi

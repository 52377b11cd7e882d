#!/bin/sh
# Launcher wrapper for MPI test runs: rank 0 writes to the console, every other rank to
# $1/rank<N>.log (so the console holds one readable pytest summary). Usage:
#   mpiexec -n 4 scripts/rank_output.sh LOGDIR python -m pytest ...
logdir=$1; shift
rank=${PMI_RANK:-${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-0}}}
mkdir -p "$logdir"
if [ "$rank" = 0 ]; then
  exec "$@"
else
  exec "$@" > "$logdir/rank$rank.log" 2>&1
fi

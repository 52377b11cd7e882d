# Shared by every hpcsuite batch template (sourced; not a job script itself).
#
# hpcsuite_env      activate the suite's environment ($HPCSUITE_HOME/.venv; HPCSUITE_HOME defaults
#                   to the folder sbatch was called from)
# hpcsuite_step ... run one MPI step with the plugin for the suite's MPI (MPICH: --mpi=pmi2) in the
#                   background, so the batch shell can take the time-limit warning
#                   (#SBATCH --signal=B:USR1@120): on USR1 the step is asked to checkpoint (SIGUSR1 to
#                   its tasks); a step that exits with code 85 ("checkpointed, not finished") gets the
#                   job requeued, and the next run continues from the checkpoint.

HPCSUITE_CHECKPOINTED=85

hpcsuite_env() {
  HPCSUITE_HOME=${HPCSUITE_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
  if [ ! -x "$HPCSUITE_HOME/.venv/bin/hpcsuite" ]; then
    echo "hpcsuite: no environment in $HPCSUITE_HOME/.venv: run scripts/setup.sh there, or set HPCSUITE_HOME" >&2
    exit 2
  fi
  # shellcheck disable=SC1091
  source "$HPCSUITE_HOME/.venv/bin/activate"
  export PYTHONUNBUFFERED=1
  echo "hpcsuite: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?} (${SLURM_NTASKS:-?} tasks), restart count ${SLURM_RESTART_COUNT:-0}"
}

_hpcsuite_forward_usr1() {
  echo "hpcsuite: time-limit warning: asking the step to checkpoint"
  [ -n "${_hpcsuite_step_pid:-}" ] && kill -USR1 "$_hpcsuite_step_pid" 2>/dev/null
}

hpcsuite_step() {
  trap _hpcsuite_forward_usr1 USR1
  srun --mpi="${HPCSUITE_SRUN_MPI:-pmi2}" "$@" &
  _hpcsuite_step_pid=$!
  local rc=0
  while :; do
    wait "$_hpcsuite_step_pid" && rc=0 || rc=$?
    # wait returns >128 when interrupted by a trapped signal while the step still runs
    kill -0 "$_hpcsuite_step_pid" 2>/dev/null || break
  done
  if [ "$rc" -eq "$HPCSUITE_CHECKPOINTED" ]; then
    echo "hpcsuite: step checkpointed; requeueing job $SLURM_JOB_ID"
    # (SLURM starts a requeued job again after a delay of about two minutes)
    scontrol requeue "$SLURM_JOB_ID" && exit 0
    echo "hpcsuite: requeue failed; resubmit this script to continue from the checkpoint" >&2
  fi
  return "$rc"
}

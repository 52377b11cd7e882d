# Shared by every hpcsuite batch template (sourced; not a job script itself). `hpcsuite jobscript`
# copies these functions into the scripts it renders, so a rendered script needs no checkout.
#
# hpcsuite_modules M... `module load` each module (a site file's [modules] load), one clear line and
#                   exit 2 if one fails
# hpcsuite_env      activate the suite's Python environment: the one a rendered script names
#                   (HPCSUITE_VENV, or HPCSUITE_BIN put in front of PATH), else the venv that was
#                   active at sbatch time ($VIRTUAL_ENV, if it has hpcsuite), else a checkout's .venv
#                   ($HPCSUITE_HOME/.venv; HPCSUITE_HOME defaults to the folder sbatch was called
#                   from), else the `hpcsuite` already on PATH
# hpcsuite_step ... run one MPI step with srun --mpi=$HPCSUITE_SRUN_MPI (a rendered script sets it;
#                   otherwise the installation says: `hpcsuite jobscript --srun-mpi`, the site file's
#                   plugin or the one for the MPI that mpi4py was built against: pmi2 for MPICH,
#                   pmix for Open MPI) in the background, so the batch shell can take the time-limit
#                   warning (#SBATCH --signal=B:USR1@120): on USR1 the step is asked to checkpoint
#                   (SIGUSR1 to its tasks); a step that exits with code 85 ("checkpointed, not
#                   finished") gets the job requeued, and the next run continues from the checkpoint.

HPCSUITE_CHECKPOINTED=85

hpcsuite_modules() {
  if ! command -v module >/dev/null 2>&1; then      # a non-login batch shell may lack the function
    local init
    for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash \
                /usr/share/modules/init/bash; do
      # shellcheck disable=SC1090
      if [ -r "$init" ]; then source "$init"; break; fi
    done
  fi
  if ! command -v module >/dev/null 2>&1; then
    echo "hpcsuite: the site file asks for modules ($*) but this node has no 'module' command" >&2
    exit 2
  fi
  local m flags=$-
  set +eu                                           # module systems are not written for set -eu
  for m in "$@"; do
    if ! module load "$m"; then
      echo "hpcsuite: 'module load $m' failed (from the site file ${HPCSUITE_SITE:-})" >&2
      exit 2
    fi
  done
  case $flags in *e*) set -e;; esac
  case $flags in *u*) set -u;; esac
}

hpcsuite_env() {
  if [ -n "${HPCSUITE_VENV:-}" ]; then
    if [ ! -r "$HPCSUITE_VENV/bin/activate" ]; then
      echo "hpcsuite: the Python environment this script was rendered for ($HPCSUITE_VENV) is gone: render the script again (hpcsuite jobscript)" >&2
      exit 2
    fi
    # shellcheck disable=SC1091
    source "$HPCSUITE_VENV/bin/activate"
  elif [ -n "${HPCSUITE_BIN:-}" ]; then
    export PATH="$HPCSUITE_BIN:$PATH"
  elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/hpcsuite" ] && [ -r "$VIRTUAL_ENV/bin/activate" ]; then
    # shellcheck disable=SC1091
    source "$VIRTUAL_ENV/bin/activate"
  else
    HPCSUITE_HOME=${HPCSUITE_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
    if [ -x "$HPCSUITE_HOME/.venv/bin/hpcsuite" ]; then
      # shellcheck disable=SC1091
      source "$HPCSUITE_HOME/.venv/bin/activate"
    fi
  fi
  if ! command -v hpcsuite >/dev/null 2>&1; then
    echo "hpcsuite: no hpcsuite command: render the script with 'hpcsuite jobscript' from the environment it should use, activate that environment before sbatch, or set HPCSUITE_HOME to a checkout with .venv" >&2
    exit 2
  fi
  export PYTHONUNBUFFERED=1
  echo "hpcsuite: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?} (${SLURM_NTASKS:-?} tasks), restart count ${SLURM_RESTART_COUNT:-0}"
}

_hpcsuite_forward_usr1() {
  echo "hpcsuite: time-limit warning: asking the step to checkpoint"
  [ -n "${_hpcsuite_step_pid:-}" ] && kill -USR1 "$_hpcsuite_step_pid" 2>/dev/null
}

hpcsuite_step() {
  trap _hpcsuite_forward_usr1 USR1
  if [ -z "${HPCSUITE_SRUN_MPI:-}" ]; then
    HPCSUITE_SRUN_MPI=$(hpcsuite jobscript --srun-mpi) || exit 2
  fi
  srun --mpi="$HPCSUITE_SRUN_MPI" "$@" &
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

#!/usr/bin/env bash
# Stop the private SLURM cluster started by scripts/slurm/start.sh and leave nothing behind:
# cancel jobs, stop slurmd, slurmctld and munged by the PIDs in their pid files (SIGKILL after a
# grace period), then remove the folder. Idempotent.
#   scripts/slurm/stop.sh [DIR]      (default: $HPCSUITE_SLURM_DIR or /tmp/hpcsuite-slurm)
set -uo pipefail
# Debian puts the daemons in /usr/sbin, which is not on every user's PATH
export PATH="$PATH:/usr/sbin:/sbin"
dir=$(realpath -m "${1:-${HPCSUITE_SLURM_DIR:-/tmp/hpcsuite-slurm}}")
[ -d "$dir" ] || exit 0
export SLURM_CONF="$dir/slurm.conf"
if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
  scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
fi

stop_pid() {      # stop_pid PIDFILE: TERM, wait up to 5 s, then KILL; a zombie counts as gone
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    st=$(ps -o stat= -p "$pid" 2>/dev/null | tr -d ' ')
    [ -z "$st" ] || [ "${st:0:1}" = Z ] && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}
for f in "$dir"/slurmd-*.pid "$dir/slurmd.pid"; do stop_pid "$f"; done
stop_pid "$dir/slurmctld.pid"
stop_pid "$dir/munge/munged.pid"
# job steps that slurmd started (slurmstepd) and outlived it
pkill -KILL -f "slurmstepd.*$dir" 2>/dev/null || true
rm -rf "$dir"
exit 0

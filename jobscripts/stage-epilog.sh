#!/usr/bin/env bash
# Clean up after `hpcsuite stage up` on this node when its job was killed before `stage down` ran.
#
# As a SLURM epilog (slurm.conf: Epilog=/path/to/jobscripts/stage-epilog.sh; runs on every node of
# the job after it ends, with SLURM_JOB_ID set), or by hand:  stage-epilog.sh JOBID
#
# Finds the job's folders in /dev/shm by name (hpcsuite-ceph-job<ID>-*, hpcsuite-stage-*-job<ID>,
# hpcsuite-store-*-job<ID>*), unmounts a ceph-fuse mount in them, stops every daemon listed in their
# pids/*.json (only if /proc/<pid>/stat still shows the recorded start time: a recycled PID is never
# signalled; SIGTERM, then SIGKILL after 5 s) and deletes the folders (OSD RAM files included).
# Pure bash + coreutils: it does not need the suite's Python environment. Always exits 0 (an epilog
# that fails drains the node), and prints what it did.
set -u
job=${1:-${SLURM_JOB_ID:-}}
if ! [[ "$job" =~ ^[0-9]+(_[0-9]+)?$ ]]; then
  echo "stage-epilog: no job id (give one, or run as a SLURM epilog with SLURM_JOB_ID set)" >&2
  exit 0
fi
shopt -s nullglob
dirs=(/dev/shm/hpcsuite-ceph-job"$job"-* /dev/shm/hpcsuite-stage-*-job"$job" /dev/shm/hpcsuite-store-*-job"$job"*)
((${#dirs[@]})) || exit 0

field() {   # field KEY FILE: an integer value from a one-line JSON pid file
  sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p" "$2"
}
live() {    # live PID START: true if PID runs and (START=0 or its start time matches)
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  read -r -a f <<<"$rest"
  [[ "${f[0]}" != Z && "${f[0]}" != X ]] || return 1
  [[ "$2" == 0 || "${f[19]}" == "$2" ]]
}

pids=()
for d in "${dirs[@]}"; do
  if [ -d "$d/mnt" ] && mountpoint -q "$d/mnt" 2>/dev/null; then
    fusermount3 -u "$d/mnt" 2>/dev/null || fusermount -u "$d/mnt" 2>/dev/null || umount -l "$d/mnt"
    echo "stage-epilog: unmounted $d/mnt"
  fi
  for f in "$d"/pids/*.json; do
    pid=$(field pid "$f"); start=$(field start "$f")
    if [ -n "$pid" ] && live "$pid" "${start:-0}"; then
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid:${start:-0}")
    fi
  done
done
for _ in $(seq 50); do
  left=()
  for ps in "${pids[@]}"; do live "${ps%%:*}" "${ps##*:}" && left+=("$ps"); done
  pids=("${left[@]}")
  ((${#pids[@]})) || break
  sleep 0.1
done
for ps in "${pids[@]}"; do kill -KILL "${ps%%:*}" 2>/dev/null; done
for d in "${dirs[@]}"; do
  # a daemon that just died may still have had a file open: retry a few times
  for _ in 1 2 3 4 5; do
    rm -rf --one-file-system "$d" 2>/dev/null
    [ -e "$d" ] || break
    sleep 0.5
  done
  if [ -e "$d" ]; then echo "stage-epilog: could not remove $d" >&2; else echo "stage-epilog: removed $d"; fi
done
exit 0

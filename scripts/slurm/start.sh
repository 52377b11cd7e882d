#!/usr/bin/env bash
# Start a private single-node SLURM cluster (munge, slurmctld, slurmd) for tests and demos.
# No systemd; every file (keys, sockets, state, logs, pid files) lives in one folder.
#
#   scripts/slurm/start.sh [DIR]     (default: $HPCSUITE_SLURM_DIR or /tmp/hpcsuite-slurm)
#   export SLURM_CONF=DIR/slurm.conf # for sbatch/squeue/sinfo (start.sh prints this line)
#   scripts/slurm/stop.sh [DIR]
#
# Each node advertises 4 CPUs (SlurmdParameters=config_overrides) so 4-rank jobs run on 2 cores.
# HPCSUITE_SLURM_GPUS=G (default 0, at most 4) declares G GPUs per node as a generic resource
# backed by harmless character devices (/dev/null, /dev/zero, ...: SLURM wants device files), so GPU
# job scripts (--gpus-per-node) are accepted, scheduled and launched; no job gets a real GPU.
# HPCSUITE_SLURM_NODES=N (default 1) emulates N nodes on this machine: one slurmd per node
# (`slurmd -N`), named <host>-1..<host>-N, each on its own port, all at NodeAddr 127.0.0.1. SLURM
# and MPI (through PMI's process mapping) treat them as separate nodes, so multi-node job scripts,
# `srun --overlap` per-node tasks and inter-node MPI paths run for real; only the kernel is shared.
# Ports 6817 and 6818.. are fixed: one such cluster per machine at a time. Needs root (slurmd) and
# the Debian packages slurm-wlm and munge (scripts/setup.sh installs them).
set -euo pipefail
# Debian puts the daemons in /usr/sbin, which is not on every user's PATH
export PATH="$PATH:/usr/sbin:/sbin"
dir=$(realpath -m "${1:-${HPCSUITE_SLURM_DIR:-/tmp/hpcsuite-slurm}}")
node=$(hostname -s)
cpus=${HPCSUITE_SLURM_CPUS:-4}
nnodes=${HPCSUITE_SLURM_NODES:-1}
gpus=${HPCSUITE_SLURM_GPUS:-0}
[[ "$gpus" =~ ^[0-4]$ ]] || { echo "slurm/start: HPCSUITE_SLURM_GPUS must be a count from 0 to 4, got '$gpus'" >&2; exit 1; }
[[ "$nnodes" =~ ^[1-9][0-9]*$ ]] || { echo "slurm/start: HPCSUITE_SLURM_NODES must be a positive integer, got '$nnodes'" >&2; exit 1; }
if [ "$nnodes" = 1 ]; then
  names=("$node")
else
  names=(); for i in $(seq 1 "$nnodes"); do names+=("$node-$i"); done
fi
for b in munged mungekey slurmctld slurmd sinfo; do
  command -v "$b" >/dev/null || { echo "slurm/start: $b not found: install slurm-wlm and munge (scripts/setup.sh)" >&2; exit 1; }
done
# slurmd loads its pmix plugin (srun --mpi=pmix, how Open MPI starts under SLURM) only if libpmix
# was installed when it started; say so now rather than wedge an Open MPI job later
if ! ls /usr/lib/*/libpmix.so.2* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libpmix\.so\.2'; then
  echo "slurm/start: warning: libpmix2 is not installed: srun --mpi=pmix (Open MPI) will not work on this cluster (scripts/setup.sh installs it)" >&2
fi
if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
  echo "slurm/start: a cluster is already running from $dir (scripts/slurm/stop.sh $dir first)" >&2
  exit 1
fi
for port in 6817 $(seq 6818 $((6817 + nnodes))); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "slurm/start: port $port is in use: another SLURM cluster runs on this machine" >&2
    exit 1
  fi
done
mkdir -p "$dir"/{state,spool,munge,log}
for n in "${names[@]}"; do mkdir -p "$dir/tmp/$n"; done
chmod 0700 "$dir" "$dir/munge"

# ---- munge: a private key and socket
[ -f "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key" >/dev/null 2>&1
chmod 0600 "$dir/munge/munge.key"
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
       --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
       --log-file="$dir/log/munged.log" --force

# ---- slurm.conf (and gres.conf: emulated GPUs on stand-in character devices)
gres=""
if [ "$gpus" -gt 0 ]; then
  gres="gpu:$gpus"
  devs=(/dev/null /dev/zero /dev/full /dev/urandom)
  echo "Name=gpu File=$(IFS=,; echo "${devs[*]:0:$gpus}")" > "$dir/gres.conf"
fi
# Emulated nodes share one kernel and one hostname. MPICH tells them apart through PMI alone, but
# Open MPI also names its shared-memory files after the host: give every task its node's own
# temporary folder (Open MPI's session directory) and shared-memory folder, as separate hosts have.
task_prolog=""
if [ "$nnodes" -gt 1 ]; then
  task_prolog="$dir/task-prolog.sh"
  cat > "$task_prolog" <<EOF
#!/bin/sh
echo "export TMPDIR=$dir/tmp/\$SLURMD_NODENAME"
echo "export OMPI_MCA_btl_vader_backing_directory=$dir/tmp/\$SLURMD_NODENAME"
EOF
  chmod 0755 "$task_prolog"
fi
cat > "$dir/slurm.conf" <<EOF
ClusterName=hpcsuite
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: how long a requeued job waits before it may start again (default 120 s; starting
# it sooner fails with "Job credential revoked"). Short here so requeue tests finish quickly.
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# per node: the pmix plugin (Open MPI's srun --mpi=pmix) puts each step's PMIx directory under
# TmpFS, and two emulated nodes sharing /tmp would collide there
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmi2
${gres:+GresTypes=gpu}
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
${HPCSUITE_SLURM_EPILOG:+Epilog=$HPCSUITE_SLURM_EPILOG}
${task_prolog:+TaskProlog=$task_prolog}
$(for i in "${!names[@]}"; do
  echo "NodeName=${names[$i]} NodeAddr=127.0.0.1 Port=$((6818 + i)) CPUs=$cpus RealMemory=$((16000 / nnodes))${gres:+ Gres=$gres} State=UNKNOWN"
done)
PartitionName=debug Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -c -f "$SLURM_CONF"
for n in "${names[@]}"; do slurmd -f "$SLURM_CONF" -N "$n"; done

# ---- wait until every node is idle (or fail with the logs' tails)
for _ in $(seq 1 150); do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
  state=$(sinfo -h -o %T 2>/dev/null | sort -u | tr '\n' ' ' || true)
  [ "$idle" = "$nnodes" ] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm/start: the nodes did not become idle within 30 s (states: ${state:-none}); logs in $dir/log" >&2
tail -n 5 "$dir"/log/slurmctld.log "$dir"/log/slurmd-*.log >&2 || true
"$(dirname "$0")/stop.sh" "$dir" >/dev/null 2>&1 || true
exit 1

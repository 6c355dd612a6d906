#!/usr/bin/env bash
# A single-node Slurm for the tests and benches: `cluster.sh up STATE` writes STATE/slurm.conf,
# starts munged (when none runs), slurmctld and slurmd, and waits until the node is idle;
# `cluster.sh down STATE` stops what `up` started. Clients find the cluster through
# SLURM_CONF=STATE/slurm.conf. Needs root and Debian's slurm-wlm and munge (.ci/install).
# The cgroup plugins want systemd or a delegated cgroup v2, which CI machines do not give:
# processes are tracked by parent pid (proctrack/linuxproc) and tasks are not bound.
set -euo pipefail
cmd=${1:?usage: cluster.sh up|down STATE}
state=$(realpath -m "${2:?usage: cluster.sh up|down STATE}")
conf=$state/slurm.conf

stop_pidfile() {
  local file=$1
  [ -s "$file" ] || return 0
  local pid
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

case $cmd in
down)
  stop_pidfile "$state/d.pid"
  stop_pidfile "$state/ctld.pid"
  stop_pidfile "$state/munged.pid"
  exit 0
  ;;
up) ;;
*) echo "usage: cluster.sh up|down STATE" >&2; exit 2 ;;
esac

[ "$(id -u)" = 0 ] || { echo "cluster.sh: Slurm's daemons run as root here; run as root" >&2; exit 1; }
for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || { echo "cluster.sh: $tool is missing: apt-get install slurm-wlm munge (.ci/install does)" >&2; exit 1; }
done
mkdir -p "$state/state" "$state/spool" "$state/log"

# munge: a key (.ci/install writes one), and a daemon unless one answers already.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { echo "cluster.sh: /etc/munge/munge.key is missing (.ci/install writes it)" >&2; exit 1; }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  munged --force --pid-file="$state/munged.pid" 2>"$state/log/munged.err" ||
    { cat "$state/log/munged.err" >&2; exit 1; }
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null || { echo "cluster.sh: munged does not answer" >&2; exit 1; }
fi

host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {m = int($2 / 1024) - 1024; if (m < 512) m = 512; print m}' /proc/meminfo)
# Ports off the defaults, so a system Slurm on the machine is left alone.
cat > "$conf" <<CONF
ClusterName=deltabench
# Addresses given, so nothing depends on the host name resolving (a fresh root's /etc/hosts may
# not name it, and a lookup then waits on DNS).
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${DELTABENCH_SLURM_PORT:-16817}
SlurmdPort=$(( ${DELTABENCH_SLURM_PORT:-16817} + 1 ))
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$state/state
SlurmdSpoolDir=$state/spool
SlurmctldLogFile=$state/log/ctld.log
SlurmdLogFile=$state/log/d.log
SlurmctldPidFile=$state/ctld.pid
SlurmdPidFile=$state/d.pid
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# A cancelled shard gets SIGTERM, then SIGKILL after KillWait: deltabench records its running
# trials as interrupted well within it.
KillWait=10
MinJobAge=30
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$conf
slurmctld -f "$conf" -c || { tail -20 "$state/log/ctld.log" >&2; exit 1; }
slurmd -f "$conf" || { tail -20 "$state/log/d.log" >&2; exit 1; }
for _ in $(seq 100); do
  if sinfo -h -o %t 2>/dev/null | grep -qx idle; then
    echo "slurm up: SLURM_CONF=$conf"
    exit 0
  fi
  sleep 0.2
done
echo "cluster.sh: the node did not become idle in 20 s:" >&2
sinfo >&2 || true
tail -20 "$state/log/ctld.log" "$state/log/d.log" >&2
exit 1

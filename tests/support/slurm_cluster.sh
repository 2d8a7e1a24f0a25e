#!/usr/bin/env bash
# A throwaway Slurm cluster on this host for the Slurm backend's tests:
# one private munged, one slurmctld and N slurmd (nodes n1..nN, one port
# each), everything under DIR (config, keys, spool, logs, pid files), so no
# system daemon is touched and nothing is left behind.
#
#   slurm_cluster.sh start DIR N [PID]  prints SLURM_CONF=DIR/slurm.conf once every node is idle;
#                                       with PID, stops the cluster by itself once PID is gone (a
#                                       test killed at its timeout runs no teardown of its own)
#   slurm_cluster.sh stop DIR           stops the daemons, then every slurmstepd and task they left
#
# Needs root (slurmd launches tasks as the submitting user) and Debian's
# slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh).
# Exit status 3 means those are missing: the caller may skip, nothing else.
set -euo pipefail

cmd=${1:?usage: slurm_cluster.sh start DIR N [PID] | stop DIR}
dir=${2:?usage: slurm_cluster.sh start DIR N [PID] | stop DIR}

pids_of() {  # the live pids listed in DIR/*.pid files matching $1
  local f
  for f in "$dir"/$1; do
    [[ -f $f ]] || continue
    local p
    p=$(cat "$f" 2>/dev/null || true)
    [[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null && echo "$p"
  done
  return 0
}

# Every process whose environment names this cluster's config: the steps'
# slurmstepd and the tasks they launched (killing slurmd leaves them running),
# and srun/sbatch clients started against it.
stragglers() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" ]] && continue
    if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$dir/slurm.conf"; then echo "$p"; fi
  done
  # slurmstepd is started by slurmd without SLURM_CONF; it names its spool dir.
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if grep -qF "$dir/" "/proc/$p/cmdline" 2>/dev/null || ls -l "/proc/$p/cwd" 2>/dev/null | grep -qF "$dir/"; then
      echo "$p"
    fi
  done
  return 0
}

stop() {
  local daemons
  daemons=$(pids_of 'slurmd-*.pid'; pids_of slurmctld.pid)
  # Tasks and steps first: a stopped slurmd cannot clean them up any more.
  local s
  s=$(stragglers)
  [[ -n $s ]] && kill -KILL $s 2>/dev/null || true
  [[ -n $daemons ]] && kill -TERM $daemons 2>/dev/null || true
  for _ in $(seq 1 50); do
    daemons=$(pids_of 'slurmd-*.pid'; pids_of slurmctld.pid)
    [[ -z $daemons ]] && break
    sleep 0.1
  done
  [[ -n $daemons ]] && kill -KILL $daemons 2>/dev/null || true
  s=$(stragglers)
  [[ -n $s ]] && kill -KILL $s 2>/dev/null || true
  local m
  m=$(pids_of munged.pid)
  [[ -n $m ]] && kill -TERM $m 2>/dev/null || true
  return 0
}

if [[ $cmd == stop ]]; then
  stop
  exit 0
fi

n=${3:?usage: slurm_cluster.sh start DIR N [PID]}
watch=${4:-}
for tool in slurmctld slurmd munged scontrol srun sbatch; do
  if ! command -v "$tool" >/dev/null && [[ ! -x /usr/sbin/$tool ]]; then
    echo "slurm_cluster: $tool is not installed; run scripts/install-deps.sh as root" >&2
    exit 3
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  echo "slurm_cluster: needs root to run slurmd; run the test as root" >&2
  exit 3
fi
export PATH=$PATH:/usr/sbin
trap 'stop' ERR

if [[ -n $watch ]]; then
  # The reaper: outside this script's session and without SLURM_CONF (stop
  # spares it), it waits for the owner to go, however it went.
  # (A zombie counts as gone: nobody may be reaping it.)
  setsid env -u SLURM_CONF bash -c \
    'while s=$(ps -o stat= -p "$1") && [[ $s != Z* ]]; do sleep 1; done; exec bash "$2" stop "$3"' \
    reaper "$watch" "$(readlink -f "$0")" "$dir" </dev/null >/dev/null 2>&1 &
fi

mkdir -p "$dir"/{munge,spool/ctld,log}
# munged insists that its key and socket directories belong to it, are not
# writable by others and can be searched by all (clients reach the socket).
chown munge:munge "$dir/munge"
chmod 0755 "$dir/munge"
# ... and every directory above it searchable by all (munged checks): a
# test's mkdtemp dir is 0700. Search permission only, nothing becomes readable.
d=$(cd "$dir" && pwd)
while [[ $d != / ]]; do
  [[ $(stat -c %A "$d") =~ ^d..[xs]..[xs]..[xt] ]] || chmod a+x "$d"
  d=$(dirname "$d")
done
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chown munge:munge "$dir/munge/munge.key"
chmod 0400 "$dir/munge/munge.key"
runuser -u munge -- munged --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
ln -sf "$dir/munge/munged.pid" "$dir/munged.pid"

# Ports: one for slurmctld, one per slurmd, from a base picked at random so
# that a cluster left by a crashed run does not collide with this one, and
# below the kernel's ephemeral range (ip_local_port_range, 32768 up by
# default), where any outgoing connection of the suite may hold a port:
# the old base reached 52996, and a fresh clone's suite once saw n3 never
# register ("unk*" after 60 s), as a slurmd whose port was taken would.
lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
step=$((n + 1 > 8 ? n + 1 : 8))  # two clusters' blocks never overlap
span=$(((${lo:-32768} - 21000 - step) / step))
((span > 0)) || span=1
base=$((21000 + RANDOM % span * step))
host=$(hostname -s)
{
  echo "ClusterName=bulwarktest"
  echo "SlurmctldHost=$host(127.0.0.1)"
  echo "SlurmctldPort=$base"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$dir/munge/munge.sock"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "ReturnToService=2"
  echo "MpiDefault=none"
  echo "SlurmdParameters=config_overrides"
  echo "SlurmdTimeout=30"
  echo "SchedulerParameters=sched_interval=1"
  echo "SlurmctldPidFile=$dir/slurmctld.pid"
  echo "SlurmdPidFile=$dir/slurmd-%n.pid"
  echo "SlurmdSpoolDir=$dir/spool/%n"
  echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
  echo "StateSaveLocation=$dir/spool/ctld"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  for i in $(seq 1 "$n"); do
    echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + i)) CPUs=2 RealMemory=1000"
  done
  echo "PartitionName=test Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP"
} >"$dir/slurm.conf"
export SLURM_CONF=$dir/slurm.conf

slurmctld -c -f "$SLURM_CONF"
for i in $(seq 1 "$n"); do
  mkdir -p "$dir/spool/n$i"
  slurmd -N "n$i" -f "$SLURM_CONF"
done

# Ready when every node reports idle (60 s: a loaded host is slow to start
# five daemons).
for _ in $(seq 1 600); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l || true)
  [[ $idle -eq $n ]] && break
  sleep 0.1
done
if [[ ${idle:-0} -ne $n ]]; then
  echo "slurm_cluster: only ${idle:-0} of $n nodes idle after 60 s; see $dir/log" >&2
  sinfo -N >&2 || true
  stop
  exit 1
fi
echo "SLURM_CONF=$SLURM_CONF"

#!/usr/bin/env bash
# local-cluster.sh COMMAND [ARGS...]: runs COMMAND against a one-node Slurm started on this
# machine for it alone, then stops that Slurm. For tests and for trying scripts/slurm/train.sbatch
# without a cluster; it needs root (slurmd runs jobs as their user) and Debian's slurm-wlm and
# munge (scripts/install-deps.sh).
#
# Everything lives in one fresh temp dir: a munge key and munged's socket, a generated slurm.conf
# (this host's name and cores, free ports, process tracking by the process tree so no cgroups are
# needed, no accounting), the daemons' state, spool and logs. COMMAND sees SLURM_CONF (so srun,
# sbatch, sinfo find this Slurm) and LOOM_SLURM_DIR (the temp dir). On exit, however it comes,
# the jobs are cancelled, the daemons are stopped by pid and the temp dir is removed; the daemons'
# logs are printed when COMMAND or the start-up failed. The exit status is COMMAND's.
#
# Environment: LOOM_SLURM_CPUS (the node's CPUs, default nproc), LOOM_SLURM_WAIT_S (how long
# each start-up step may take, default 30), LOOM_SLURM_KEEP=1 (keep the temp dir).
#
# LOOM_SLURM_NETNS=1: a Slurm of several nodes instead, on the test cluster that is up
# (scripts/netns-cluster.sh, NOTE [Test cluster]; LOOM_CLUSTER and LOOM_CLUSTER_DIR name it): one
# node per host of its hostfile, named as the host ($LOOM_CLUSTER-h1 ...), with its slots as CPUs,
# each slurmd inside its host's namespace under the host's name, so a job's tasks on two nodes talk
# over the hosts' link; slurmctld listens on the bridge's address. A node that stops answering is
# set DOWN after 10 s (SlurmdTimeout), so a job started with --no-kill can go on without it.
set -euo pipefail

die() { echo "local-cluster: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: local-cluster.sh COMMAND [ARGS...]"
[ "$(id -u)" -eq 0 ] || die "needs root: slurmd starts jobs as their user (run as root, as CI does)"
for tool in munged slurmctld slurmd srun sinfo scontrol scancel squeue python3; do
  command -v "$tool" >/dev/null || die "'$tool' is missing: install slurm-wlm and munge (scripts/install-deps.sh)"
done

host=$(hostname -s)
netns=${LOOM_SLURM_NETNS:-0}
ctld_addr=127.0.0.1
nodes=()  # NAME ADDR CPUS of each node
if [ "$netns" = 1 ]; then
  cluster=${LOOM_CLUSTER:-loom}
  hostfile=${LOOM_CLUSTER_DIR:-/tmp/loom-cluster-$cluster}/hostfile
  [ -f "$hostfile" ] || die "LOOM_SLURM_NETNS=1, but no test cluster is up ($hostfile); hint: scripts/netns-cluster.sh up N"
  while read -r addr slots; do
    nodes+=("$cluster-h${addr##*.} $addr ${slots#slots=}")
    ctld_addr=${addr%.*}.254  # the bridge's address on the hosts' subnet
  done < "$hostfile"
else
  nodes=("$host 127.0.0.1 ${LOOM_SLURM_CPUS:-$(nproc)}")
fi
wait_s=${LOOM_SLURM_WAIT_S:-30}
dir=$(mktemp -d "${TMPDIR:-/tmp}/loom-slurm.XXXXXX")
chmod 700 "$dir"
pids=()
status=1

# Each daemon's log, or what it printed before its log was open (a bad slurm.conf, say).
show_logs() {
  local log daemon
  for daemon in munged slurmctld $(cd "$dir" && ls slurmd-*.std* 2>/dev/null | sed 's/\.std.*//'); do
    log=$dir/$daemon.log
    [ -s "$log" ] || log=$dir/$daemon.stderr
    [ -s "$log" ] || continue
    echo "----- $(basename "$log") (last 40 lines)" >&2
    tail -n 40 "$log" >&2
  done
}

# Stops what this script started: jobs first (their step daemons belong to slurmd), then the
# daemons in reverse order of start, each by its pid, with SIGKILL for one that outlives 10 s.
stop_all() {
  set +e
  if [ ${#pids[@]} -ge 3 ]; then
    scancel --full --quiet --partition=loom >/dev/null 2>&1
    for _ in $(seq 50); do
      [ -z "$(squeue --noheader --partition=loom 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  [ "$status" -eq 0 ] || (show_logs)  # a subshell: a closed stderr must not keep the temp dir
  if [ "${LOOM_SLURM_KEEP:-0}" = 1 ]; then echo "local-cluster: kept $dir" >&2; else rm -rf "$dir"; fi
}
trap 'stop_all' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Two ports nothing has bound, from a range the kernel does not hand out to outgoing connections.
free_ports() {
  python3 - <<'PY'
import random, socket
found = []
for port in random.sample(range(20000, 30000), 200):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            continue
    found.append(port)
    if len(found) == 2:
        print(*found)
        break
PY
}

# Waits up to wait_s for COMMAND to succeed; on timeout names WHAT and fails (the logs follow).
wait_for() {
  local what=$1; shift
  local deadline=$((SECONDS + wait_s))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what did not happen within ${wait_s} s (LOOM_SLURM_WAIT_S)"
    sleep 0.2
  done
}

start_munge() {
  head -c 1024 /dev/urandom >"$dir/munge.key"
  chmod 400 "$dir/munge.key"
  munged --foreground --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" \
    2>"$dir/munged.stderr" &
  pids+=($!)
  wait_for "munged's socket" test -S "$dir/munge.socket"
}

write_conf() {
  local ctld_port slurmd_port
  read -r ctld_port slurmd_port < <(free_ports)
  [ -n "$slurmd_port" ] || die "no two free ports found in 20000-29999"
  mkdir -p "$dir/state" "$dir/tmp"
  cat >"$dir/slurm.conf" <<CONF
# Generated by scripts/slurm/local-cluster.sh: a Slurm for one command.
ClusterName=loom
SlurmctldHost=$host($ctld_addr)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's next start (120 s by default).
AuthInfo=socket=$dir/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
CONF
  # A node that stops answering is DOWN after 10 s, where a job may go on without it (--no-kill).
  if [ "$netns" = 1 ]; then echo "SlurmdTimeout=10" >> "$dir/slurm.conf"; fi
  local node name addr cpus names=()
  for node in "${nodes[@]}"; do
    read -r name addr cpus <<< "$node"
    echo "NodeName=$name NodeAddr=$addr CPUs=$cpus State=UNKNOWN" >> "$dir/slurm.conf"
    names+=("$name")
    mkdir -p "$dir/spool/$name"
  done
  node_list=$(IFS=,; echo "${names[*]}")
  echo "PartitionName=loom Nodes=$node_list Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >> "$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
}

# Every node idle: one state line, "idle".
nodes_idle() { [ "$(sinfo --noheader --nodes="$node_list" --format=%t 2>/dev/null)" = idle ]; }

start_slurm() {
  slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.stderr" 2>&1 &
  pids+=($!)
  wait_for "slurmctld answering" scontrol ping
  local node name addr cpus
  for node in "${nodes[@]}"; do
    read -r name addr cpus <<< "$node"
    if [ "$netns" = 1 ]; then
      # In the host's network namespace, under its name (its own UTS namespace) as the cluster's
      # agent, with a TmpFS of its own as a node has (PMIx keeps each step's folder there). By
      # nsenter: `ip netns exec` would mount a /sys without the cgroup tree slurmd reads.
      nsenter --net="/run/netns/$name" unshare --uts --mount /bin/sh -c \
        "mount -t tmpfs loom-tmp $dir/tmp && hostname $name && exec slurmd -D -N $name -f $SLURM_CONF" \
        >"$dir/slurmd-$name.stderr" 2>&1 &
    else
      slurmd -D -N "$name" -f "$SLURM_CONF" >"$dir/slurmd-$name.stderr" 2>&1 &
    fi
    pids+=($!)
  done
  wait_for "nodes $node_list becoming idle" nodes_idle
}

start_munge
write_conf
start_slurm
export LOOM_SLURM_DIR=$dir
set +e
"$@"
status=$?
set -e
exit "$status"

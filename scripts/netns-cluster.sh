#!/usr/bin/env bash
# NOTE [Test cluster]: several hosts on this one machine, for runs that cross a network. Each host
# is a network namespace with its own address on a bridge and its own hostname (a UTS namespace
# entered by the launcher agent), so Open MPI starts one daemon per host and its ranks talk over
# TCP between hosts and through shared memory within one, as on real machines. The file system is
# the machine's: every host sees the same checkpoint directory, as a shared one on real hosts.
#
#   scripts/netns-cluster.sh up N [--slots S] [--rate RATE] [--delay DELAY] [--loss PCT]
#                                                             N hosts of S slots (default 2)
#   scripts/netns-cluster.sh down                             removes what `up` made
#   scripts/netns-cluster.sh mpirun ARGS...                   mpirun over the cluster's hosts (or
#                                                             over those of a --hostfile in ARGS)
#   scripts/netns-cluster.sh dropped                          the packets --loss has dropped
#
# --rate shapes each host's outgoing link (tc tbf, e.g. 1gbit). --delay holds every packet a host
# sends that long (e.g. 1ms, 500us) before the bridge has it: between two hosts, DELAY one way and
# twice it there and back. The kernel here has no netem, so each link is then a pair of TAP devices
# with loom_delay_line between them (NOTE [Delay line]; LOOM_DELAY_LINE, default build/bin's).
# --loss drops PCT percent of the IP packets each host receives, chosen at random (an nftables
# rule on the link's ingress): every packet between two hosts, either way, is lost with that
# chance, as on a lossy link. `up` writes the hostfile, the
# launcher agent and mpirun's options into the state folder (LOOM_CLUSTER_DIR, default
# /tmp/loom-cluster-$LOOM_CLUSTER). LOOM_CLUSTER (default "loom", 1 to 8 of a-z and 0-9) names
# the namespaces ($LOOM_CLUSTER-h1 ...), the bridge and the links, LOOM_CLUSTER_SUBNET (default
# 10.77.0) their addresses: two clusters side by side need two of each (`up` refuses a subnet in
# use). Needs root (namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2, util-linux's
# unshare and Open MPI, and nftables for --loss; exits 77 with the reason where any is missing.
set -euo pipefail

die() { echo "loom: error: $*" >&2; exit 2; }
source "$(dirname -- "${BASH_SOURCE[0]}")/skip.sh"  # skip CAPABILITY REASON: exit 77, or 1 where LOOM_REQUIRE names it

cluster=${LOOM_CLUSTER:-loom}
[[ "$cluster" =~ ^[a-z0-9]{1,8}$ ]] || die "LOOM_CLUSTER = '$cluster'; hint: 1 to 8 of a-z and 0-9 (it names network links)"
dir=${LOOM_CLUSTER_DIR:-/tmp/loom-cluster-$cluster}
bridge="${cluster}br0"
subnet=${LOOM_CLUSTER_SUBNET:-10.77.0}  # the hosts: $subnet.1 .. $subnet.N; the bridge (mpirun's side) .254
[[ "$subnet" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "LOOM_CLUSTER_SUBNET = '$subnet'; hint: three numbers of an address, e.g. 10.77.0"
veth() { echo "${cluster}v$1"; }  # host $1's link on the bridge's side

# Each host's processes ended and its namespace gone; its link deleted at once (a namespace that
# still has a dying process keeps its end alive until the kernel is done with it). The delay lines
# go first: each holds its host's end.
down() {
  local pid
  for pid in $(cat "$dir/delay-lines" 2>/dev/null); do  # each still this cluster's (a pid is reused)
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = loom_delay_line ] &&
      tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q " /var/run/netns/${cluster}-h[0-9]* " &&
      kill -9 "$pid" 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${cluster}-(h[0-9]+|probe)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    [[ "$ns" =~ -h([0-9]+)$ ]] && ip link del "$(veth "${BASH_REMATCH[1]}")" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$dir" 2>/dev/null || true
}

# The launcher agent Open MPI calls as `agent HOST COMMAND...`: HOST is an address of the hostfile;
# the command runs inside that host's namespace under its own hostname.
write_agent() {
  cat > "$dir/agent" <<EOF
#!/bin/sh
host="\$1"; shift
n="\${host##*.}"
exec ip netns exec "${cluster}-h\$n" unshare --uts /bin/sh -c "hostname ${cluster}-h\$n && \$*"
EOF
  chmod +x "$dir/agent"
}

# Drops $2 in 10000 of the IP packets host namespace $1 receives on its link (see --loss).
add_loss() {
  ip netns exec "$1" nft -f - <<EOF
table netdev loomloss {
  chain ingress {
    type filter hook ingress device "eth0" priority 0;
    meta protocol ip numgen random mod 10000 < $2 counter drop
  }
}
EOF
}

usage="up N [--slots S] [--rate RATE] [--delay DELAY] [--loss PCT]"
delay_line=${LOOM_DELAY_LINE:-$(cd "$(dirname "$0")/.." && pwd)/build/bin/loom_delay_line}

# Host $1's link: a veth pair, or with a delay ($2 microseconds, $3 --per-packet or empty) two
# TAP devices joined by a delay line, whose pid goes to the state folder.
add_link() {
  local ns="${cluster}-h$1" link pid
  link=$(veth "$1")
  if [ -z "$2" ]; then
    ip link add "$link" type veth peer name eth0 netns "$ns"
    return
  fi
  ip tuntap add dev "$link" mode tap
  ip -n "$ns" tuntap add dev eth0 mode tap
  # shellcheck disable=SC2086
  pid=$("$delay_line" "/var/run/netns/$ns" eth0 "$link" "$2" $3) || exit 2  # it said why
  echo "$pid" >> "$dir/delay-lines"
}

up() {
  local hosts=$1 slots=2 rate="" loss="" delay=""
  shift
  while [ $# -gt 0 ]; do
    case "$1" in --slots|--rate|--delay|--loss) [ $# -ge 2 ] || die "netns-cluster.sh up: $1 needs a value; hint: $usage";; esac
    case "$1" in
      --slots) slots=$2; shift 2;;
      --rate) rate=$2; shift 2;;
      --delay) delay=$2; shift 2;;
      --loss) loss=$2; shift 2;;
      *) die "netns-cluster.sh up: unknown option '$1'; hint: $usage";;
    esac
  done
  local delay_us=""
  if [ -n "$delay" ]; then
    delay_us=$(awk -v d="$delay" 'BEGIN { if (match(d, /^[0-9]+(\.[0-9]+)?(ms|us)$/)) { n = d + 0; printf "%d", (d ~ /ms$/ ? n * 1000 : n) + 0.5 } }')
    [ -n "$delay_us" ] && [ "$delay_us" -ge 1 ] && [ "$delay_us" -le 1000000 ] ||
      die "netns-cluster.sh up: --delay '$delay'; hint: 1us to 1000ms, e.g. 1ms or 500us"
  fi
  local loss_in_10k=""
  if [ -n "$loss" ]; then
    loss_in_10k=$(awk -v p="$loss" 'BEGIN { if (p ~ /^[0-9]+(\.[0-9]+)?$/ && p > 0 && p < 100) printf "%d", p * 100 + 0.5 }')
    [ -n "$loss_in_10k" ] && [ "$loss_in_10k" -ge 1 ] ||
      die "netns-cluster.sh up: --loss '$loss'; hint: a percentage above 0 and below 100, e.g. 5 or 0.5"
    command -v nft >/dev/null || skip nftables "nft is not installed (nftables), which --loss needs"
  fi
  [[ "$hosts" =~ ^[0-9]+$ && "$hosts" -ge 1 && "$hosts" -le 200 ]] || die "netns-cluster.sh up: N = '$hosts' hosts; hint: 1 to 200"
  [[ "$slots" =~ ^[0-9]+$ && "$slots" -ge 1 ]] || die "netns-cluster.sh up: --slots '$slots' must be a positive count"
  local tool
  for tool in ip unshare mpirun; do
    command -v "$tool" >/dev/null || skip netns "$tool is not installed (iproute2, util-linux, openmpi-bin)"
  done
  down
  local why
  why=$(ip netns add "${cluster}-probe" 2>&1) || skip netns "network namespaces cannot be made here: $why (needs root)"
  ip netns del "${cluster}-probe"
  if [ -n "$delay_us" ]; then
    [ -c /dev/net/tun ] || skip tap "/dev/net/tun is missing: --delay needs TAP devices"
    [ -x "$delay_line" ] ||
      die "netns-cluster.sh up: --delay needs $delay_line; hint: cmake --build build --target loom_delay_line, or set LOOM_DELAY_LINE"
  fi
  if ip -o -4 addr show 2>/dev/null | grep -q " inet $subnet\."; then
    die "netns-cluster.sh up: the subnet $subnet.0/24 is in use here; hint: another LOOM_CLUSTER_SUBNET, e.g. ${subnet%.*}.$(( ${subnet##*.} + 1 ))"
  fi
  trap down EXIT  # a cluster half made is taken down
  mkdir -p "$dir"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  : > "$dir/hostfile"
  for i in $(seq 1 "$hosts"); do
    local ns="${cluster}-h$i" link
    link=$(veth "$i")
    ip netns add "$ns"
    # A loss rule drops whole frames: with a delay, frames are single packets where it has one.
    add_link "$i" "$delay_us" "${loss_in_10k:+--per-packet}"
    ip link set "$link" master "$bridge" up
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [ -n "$rate" ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms ||
        die "netns-cluster.sh: tc could not shape $ns's link to $rate"
    fi
    if [ -n "$loss_in_10k" ]; then
      add_loss "$ns" "$loss_in_10k" || skip nftables "nft could not make $ns's link lose $loss% (the kernel needs nf_tables with netdev and numgen)"
    fi
    echo "$subnet.$i slots=$slots" >> "$dir/hostfile"
  done
  write_agent
  # TCP between hosts on the cluster's addresses only; shared memory within a host. Open MPI's
  # daemons probe their idle links after 10 s, every 5 s, 3 times (its defaults: 300, 20, 9), so
  # the launcher finds a lost host within 15 to 25 s, after loom's heartbeat (10 s) has named it
  # (NOTE [Heartbeat], docs/multi-host.md).
  # The hosts share this machine's cores. Where their slots outnumber the cores, Open MPI, which
  # sees only each host's slots, would poll for messages without yielding the core, as on hosts of
  # their own, and starve the kernel's TCP work and the ranks that compute: on 2 cores, 2 x 2 ranks'
  # ring all-reduce of 1 MiB ran at 0.010-0.025 GB/s where it runs at 0.119 yielding (that of 64
  # MiB at 0.111 and 0.117). So idle ranks yield, as Open MPI has them do where it knows it is
  # oversubscribed.
  local yield=""
  # (nproc alone would count OMP_NUM_THREADS as the cores; the bench sets it to 1.)
  [ $((hosts * slots)) -gt "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" ] && yield=" --mca mpi_yield_when_idle 1"
  cat > "$dir/mpirun-options" <<EOF
--hostfile $dir/hostfile --mca plm_rsh_agent $dir/agent --mca oob_tcp_if_include $subnet.0/24 --mca btl_tcp_if_include $subnet.0/24 --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none --bind-to none --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 3$yield
EOF
  trap - EXIT
  echo "loom: a cluster of $hosts hosts x $slots slots ($subnet.1 .. $subnet.$hosts); hostfile $dir/hostfile"
}

run_mpirun() {
  [ -f "$dir/mpirun-options" ] || die "netns-cluster.sh mpirun: no cluster is up ($dir); hint: scripts/netns-cluster.sh up N"
  local options
  options=$(cat "$dir/mpirun-options")
  # A hostfile of the caller's (some of the cluster's hosts: scripts/launch-elastic.sh) replaces the cluster's.
  case " $* " in *" --hostfile "*) options=$(sed -E 's/--hostfile [^ ]+ //' <<< "$options");; esac
  # shellcheck disable=SC2086
  exec mpirun --allow-run-as-root $options "$@"
}

# The packets --loss has dropped so far, over every host.
dropped() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${cluster}-h[0-9]+$" || true); do
    ip netns exec "$ns" nft list table netdev loomloss 2>/dev/null | sed -nE 's/.*counter packets ([0-9]+) .*/\1/p'
  done | awk '{ n += $1 } END { print n + 0 }'
}

case "${1:-}" in
  dropped) dropped;;
  up) shift; [ $# -ge 1 ] || die "netns-cluster.sh up: how many hosts? hint: $usage"; up "$@";;
  down) down;;
  mpirun) shift; run_mpirun "$@";;
  *) die "netns-cluster.sh: '${1:-}' is not one of: up, down, mpirun, dropped; hint: scripts/netns-cluster.sh $usage";;
esac

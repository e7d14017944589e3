#!/usr/bin/env bash
# The delay line's own contract (NOTE [Delay line], tools/delay_line), checked on the frames it
# carries rather than through a training run:
#   - held, never early: each datagram from the host's side takes at least DELAY one way, and the
#     shortest not much more; a TCP round trip at least DELAY (one way is held); those from the
#     other side pass at once (the shortest well under DELAY);
#   - none lost, none repeated, none reordered: 20000 numbered datagrams each way all arrive, in
#     order, with TCP's large segments (the default) and with --per-packet; a TCP stream arrives
#     intact, as large frames by default and as wire packets with --per-packet;
#   - a bounded queue: with 1 s of delay, a burst of 5000 small datagrams keeps the first 4096
#     (kMaxQueuedFrames) and drops the newest beyond, one of 3000 frames of 8 KiB the first 2048
#     (kMaxQueuedBytes, 16 MiB), and the line carries frames again once its queue has left;
#   - its start: the caller's command substitution returns at once (the daemon keeps no pipe or
#     other file of its caller's: only /dev/null as 0 to 2 and its two devices), also when the
#     caller's standard streams are all closed (no device's file takes their number); it refuses a
#     bad command line, a namespace that is not there and a device another line holds with exit 2
#     and one `loom: error:` line (tests/cli/expect_error.sh), leaving the running line alone;
#   - its end: SIGTERM ends it within a second, its frames still queued or not; so does either
#     device deleted. Then no process is left in the namespaces, neither device is attached, the
#     devices are those there were (it makes none and removes none), and a new line attaches them.
#
# The line is started by hand, not through scripts/netns-cluster.sh up --delay: there every link
# is two lines and a bridge, and frames of ARP, IPv6 and Open MPI's start mix with the test's. Here
# one line joins the TAP device `host0` of the namespace loomdl-a (the held side, the cluster's
# host) to `wire0` of loomdl-b (the side passed at once, the cluster's bridge), the line running in
# loomdl-b, with static neighbours and IPv6 off: every frame it carries is the test's, so the
# delays of each direction are apart and the queue's bound shows as exact counts. This also
# tests what only the command line sets (--per-packet, the delay, the caller's files) and needs
# no Open MPI. netns.lossy checks the cluster's use of the line (its round-trip floor).
#
# Exits 77 (ctest: skipped) with the reason where network namespaces or TAP devices cannot be made
# (scripts/skip.sh; LOOM_REQUIRE turns that into a failure). The delay line is LOOM_DELAY_LINE,
# default build/bin/loom_delay_line. Takes some 20 s.
#   usage: delay_line.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/skip.sh"
line=${LOOM_DELAY_LINE:-$root/build/bin/loom_delay_line}
traffic="$root/tests/netns/line_traffic.py"
a=loomdl-a b=loomdl-b
subnet=10.71.0  # host0 .1, wire0 .2: addresses of these two namespaces alone
a_mac=02:00:0a:47:00:01 b_mac=02:00:0a:47:00:02
delay_ms=5

fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }
# at_least X Y / below X Y: numeric comparisons of decimals.
at_least() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x >= y) }'; }
below() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x < y) }'; }

# Every process in the test's namespaces (delay lines, the traffic's ends) killed; both gone.
down() {
  local ns
  for ns in "$a" "$b"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  for ns in "$a" "$b"; do ip netns del "$ns" 2>/dev/null || true; done
}

command -v ip > /dev/null || skip netns "ip is not installed (iproute2)"
command -v python3 > /dev/null || fail "python3 is not installed"
why=$(ip netns add loomdl-probe 2>&1) || skip netns "network namespaces cannot be made here: $why (needs root)"
ip netns del loomdl-probe
[ -c /dev/net/tun ] || skip tap "/dev/net/tun is missing: the delay line needs TAP devices"
[ -x "$line" ] || fail "no delay line at $line; hint: cmake --build build --target loom_delay_line, or set LOOM_DELAY_LINE"
down  # a run killed before its clean-up
trap down EXIT
ip netns add "$a"
ip netns add "$b"
why=$(ip -n "$a" tuntap add dev host0 mode tap 2>&1) || skip tap "no TAP device can be made here: $why"

# device NS DEV MAC ADDRESS PEER_MAC PEER_ADDRESS: DEV of NS configured (a TAP device made before).
# IPv6 off and the peer's address a static neighbour: no frame on the link but the test's.
device() {
  local ns=$1 dev=$2
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$ns" link set "$dev" address "$3" txqueuelen 10000  # a burst of 5000 waits in the device, none dropped
  ip -n "$ns" addr add "$4/24" dev "$dev"
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" link set lo up
  ip -n "$ns" neigh replace "$6" lladdr "$5" dev "$dev" nud permanent
}
ip -n "$b" tuntap add dev wire0 mode tap
device "$a" host0 "$a_mac" "$subnet.1" "$b_mac" "$subnet.2"
device "$b" wire0 "$b_mac" "$subnet.2" "$a_mac" "$subnet.1"
links() { ip -n "$1" -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort | tr '\n' ' '; }
links_a=$(links "$a") links_b=$(links "$b")

# start DELAY_US [--per-packet]: a line between host0 and wire0, run in loomdl-b; sets `pid`.
# Its output goes through a pipe that is read to its end: a daemon that kept the pipe (or the
# extra file 7 opened here) would hold the command for the 5 s of the guard.
start() {
  local t0 out
  t0=$(now)
  out=$(exec 7> /dev/null; ip netns exec "$b" "$line" "/var/run/netns/$a" host0 wire0 "$@" 2>&1 | timeout 5 cat) ||
    fail "the delay line did not start, or its daemon held the caller's pipe past 5 s: '$out'"
  [[ "$out" =~ ^[0-9]+$ ]] || fail "the delay line printed '$out', not its daemon's pid"
  pid=$out
  below "$(since "$t0")" 2 || fail "the delay line's start took $(since "$t0") s: its daemon holds the caller's pipe"
  check_files "$pid"
}

# check_files PID: the daemon's files are /dev/null as 0, 1 and 2 and its two devices, no other.
check_files() {
  local fds
  fds=$(for fd in /proc/"$1"/fd/*; do echo "${fd##*/} $(readlink "$fd")"; done | sort -n | tr '\n' ',')
  [[ "$fds" =~ ^"0 /dev/null,1 /dev/null,2 /dev/null,"[0-9]+" /dev/net/tun,"[0-9]+" /dev/net/tun,"$ ]] ||
    fail "the delay line's daemon has the files '$fds', want /dev/null as 0 to 2 and two of /dev/net/tun"
}

running() { [ -e "/proc/$1" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]; }

# ended PID WHAT [SECONDS]: the daemon ended within SECONDS (default 1) of WHAT, and left nothing behind.
ended() {
  local limit=${3:-1}
  for _ in $(seq "$(awk -v s="$limit" 'BEGIN { print int(s * 20) }')"); do running "$1" || break; sleep 0.05; done
  ! running "$1" || fail "the delay line still runs $limit s after $2"
  left_nothing "after $2"
}

# left_nothing WHEN: no process in either namespace, neither device attached, the devices as made.
left_nothing() {
  local ns attached
  for ns in "$a" "$b"; do
    [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] || fail "processes are left in $ns $1: $(ip netns pids "$ns" 2>/dev/null)"
    attached=$(ip netns exec "$ns" ip -d tuntap show 2>/dev/null | grep -o '[^ :]*([0-9]*)' || true)
    [ -z "$attached" ] || fail "a device of $ns is still attached to $attached $1"
  done
  [ "$(links "$a")" = "$links_a" ] && [ "$(links "$b")" = "$links_b" ] ||
    fail "the devices changed $1: '$(links "$a")' and '$(links "$b")', were '$links_a' and '$links_b'"
}

# stream FROM TO ADDRESS COUNT SIZE RATE: numbered datagrams (line_traffic.py udp); sets received,
# prefix, min (ms), send_s, dropped (the receiving socket's own drops).
stream() {
  local result
  result=$("$traffic" udp "$@") || fail "no datagrams from $1 to $3"
  read -r _ received _ prefix _ min _ _ _ _ _ send_s _ dropped <<< "$result"
  echo "  $4 datagrams of $5 bytes, $1 -> $2: $result"
}

# in_order FROM TO ADDRESS COUNT RATE: every datagram arrived, once, in the order sent.
in_order() {
  stream "$1" "$2" "$3" "$4" 200 "$5"
  [ "$dropped" = 0 ] || fail "the receiver in $2 dropped $dropped datagrams itself (its buffer full); inconclusive"
  [ "$received" = "$4" ] || fail "$received of $4 datagrams from $1 arrived"
  [ "$prefix" = "$4" ] || fail "the datagrams from $1 arrived out of order: number $prefix came as the $((prefix + 1))th"
}

counter() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }

# bulk WHAT: 8 MiB over TCP from host0 to wire0, intact; sets frame (the mean bytes of the frames
# wire0 received).
bulk() {
  local packets bytes result
  packets=$(counter "$b" wire0 rx_packets) bytes=$(counter "$b" wire0 rx_bytes)
  result=$("$traffic" tcp "$a" "$b" "$subnet.2" $((8 << 20))) || fail "$1: no TCP stream across the line"
  echo "  8 MiB over TCP ($1): $result"
  [[ "$result" == *" intact 1 "* ]] || fail "$1: the TCP stream did not arrive intact"
  frame=$(( ($(counter "$b" wire0 rx_bytes) - bytes) / ($(counter "$b" wire0 rx_packets) - packets) ))
}

echo "refused command lines: exit 2, one line, nothing started"
expect() { "$root/tests/cli/expect_error.sh" ip "$1" netns exec "$b" "$line" "${@:2}" | sed 's/^/  /'; }
expect "usage: loom_delay_line NETNS HOST_TAP BRIDGE_TAP DELAY_US [--per-packet]" "/var/run/netns/$a" host0 wire0
expect "usage:" "/var/run/netns/$a" host0 wire0 5000 --per-packets
expect "DELAY_US = '5ms'; hint: microseconds, 0 to 10000000" "/var/run/netns/$a" host0 wire0 5ms
expect "DELAY_US = '10000001'" "/var/run/netns/$a" host0 wire0 10000001
expect "DELAY_US = '-1'" "/var/run/netns/$a" host0 wire0 -1
expect "open the namespace /var/run/netns/loomdl-none: No such file or directory" /var/run/netns/loomdl-none host0 wire0 5000
left_nothing "after the refused command lines"

echo "a line of $delay_ms ms, large segments (as scripts/netns-cluster.sh up --delay)"
start $((delay_ms * 1000))
expect "attach to host0: Device or resource busy" "/var/run/netns/$a" host0 wire0 5000
running "$pid" || fail "a refused second line ended the running one"
check_files "$pid"
trip=$("$root/tests/netns/round_trip.py" "$a" "$b" "$subnet.2") || fail "no TCP round trip across the line"
echo "  the shortest of 20 TCP round trips: $trip ms"
at_least "$trip" "$delay_ms" || fail "a round trip took $trip ms, under the $delay_ms ms one way is held"
stream "$a" "$b" "$subnet.2" 300 64 500
[ "$received" = 300 ] || fail "$received of 300 paced datagrams arrived"
at_least "$min" "$delay_ms" || fail "a datagram from host0 took $min ms, under the delay of $delay_ms ms"
below "$min" $((delay_ms + 2)) || fail "the shortest datagram from host0 took $min ms, 2 ms or more above the delay"
stream "$b" "$a" "$subnet.1" 300 64 500
[ "$received" = 300 ] || fail "$received of 300 paced datagrams arrived"
below "$min" 1 || fail "the shortest datagram from wire0 took $min ms: that side is not to be held"
in_order "$a" "$b" "$subnet.2" 20000 20000
at_least "$min" "$delay_ms" || fail "a datagram of the stream took $min ms, under the delay of $delay_ms ms"
in_order "$b" "$a" "$subnet.1" 20000 20000
bulk "large segments"
[ "$frame" -gt 1514 ] || fail "wire0 received frames of $frame bytes on average: no large segment passed"
ip -n "$b" link del wire0
links_b="lo "  # and host0 left as it was
ended "$pid" "wire0 was deleted"
ip -n "$b" tuntap add dev wire0 mode tap
device "$b" wire0 "$b_mac" "$subnet.2" "$a_mac" "$subnet.1"
links_b=$(links "$b")

echo "a line of $delay_ms ms, --per-packet, started with no standard stream open"
ip netns exec "$b" bash -c 'exec 0<&- 1>&- 2>&-; exec "$0" "$@"' "$line" "/var/run/netns/$a" host0 wire0 \
  $((delay_ms * 1000)) --per-packet || fail "the delay line did not start without standard streams"
pid=$(ip netns pids "$b" 2>/dev/null)
[[ "$pid" =~ ^[0-9]+$ ]] && [ "$(readlink "/proc/$pid/exe")" = "$(realpath "$line")" ] ||
  fail "want one delay line in $b, found '$pid'"
check_files "$pid"
in_order "$a" "$b" "$subnet.2" 20000 20000
at_least "$min" "$delay_ms" || fail "a datagram of the stream took $min ms, under the delay of $delay_ms ms"
in_order "$b" "$a" "$subnet.1" 20000 20000
bulk "--per-packet"
[ "$frame" -le 1514 ] || fail "wire0 received frames of $frame bytes on average with --per-packet, above a wire packet"
kill -TERM "$pid"
ended "$pid" "SIGTERM"

echo "a line of 1 s: its queue's bounds"
start 1000000
# burst COUNT SIZE KEPT: COUNT datagrams sent within half the delay, so that all wait at once;
# the first KEPT arrive, in order, and no more.
burst() {
  local tx_dropped
  tx_dropped=$(counter "$a" host0 tx_dropped)
  stream "$a" "$b" "$subnet.2" "$1" "$2" 0
  below "$send_s" 0.5 || fail "sending the burst took $send_s s, not within half the delay; inconclusive"
  [ "$(counter "$a" host0 tx_dropped)" = "$tx_dropped" ] || fail "host0 dropped frames before the line read them; inconclusive"
  [ "$dropped" = 0 ] || fail "the receiver in $b dropped $dropped datagrams itself (its buffer full); inconclusive"
  [ "$received" = "$3" ] && [ "$prefix" = "$3" ] ||
    fail "a burst of $1 datagrams of $2 bytes: $received came, the first $prefix in order; want the first $3, in order"
  at_least "$min" 1000 || fail "a datagram of the burst took $min ms, under the delay of 1000 ms"
}
burst 5000 64 4096  # kMaxQueuedFrames
# Frames of 8192 bytes: the datagram, 8 of UDP, 20 of IP, 14 of Ethernet and 10 of the virtio
# header. 16 MiB (kMaxQueuedBytes) holds 2048 of them, below the 4096 frames.
for ns_dev in "$a host0" "$b wire0"; do ip -n "${ns_dev% *}" link set "${ns_dev#* }" mtu 9000; done
burst 3000 8140 2048
for ns_dev in "$a host0" "$b wire0"; do ip -n "${ns_dev% *}" link set "${ns_dev#* }" mtu 1500; done
in_order "$a" "$b" "$subnet.2" 10 0  # the queue has left: the line carries frames again
# SIGTERM while frames wait: it ends at once, not when they are due (they are lost, as on a cable pulled).
ip netns exec "$a" "$traffic" --send-udp "$subnet.2" 100 64 0 > /dev/null
kill -TERM "$pid"
ended "$pid" "SIGTERM, 100 frames queued" 0.5

echo "a line of no delay: the devices attach again"
start 0
stream "$a" "$b" "$subnet.2" 300 64 500
[ "$received" = 300 ] || fail "$received of 300 datagrams arrived"
below "$min" 1 || fail "the shortest datagram took $min ms through a line of no delay"
kill -TERM "$pid"
ended "$pid" "SIGTERM"
echo "ok: the delay line holds, keeps order, bounds its queue and ends cleanly"

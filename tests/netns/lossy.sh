#!/usr/bin/env bash
# A lossy link is not a fault (NOTE [Test cluster], NOTE [Heartbeat]): 2 hosts x 2 ranks whose
# links are shaped to 1 Gbit/s, hold each packet 1 ms on its way out (`--delay 1ms`, NOTE [Delay
# line]) and lose 5% of the packets each host receives (`--loss 5`: every packet between the
# hosts, either way, is lost with that chance; TCP sends it again). Two layouts
# train 8 steps there, dp 2 x tp 2 (the gradient all-reduce crosses the hosts) and pp 2 x dp 2 (the
# pipeline's sends do, or the all-reduce, as the mesh places them): each finishes, with no
# `loom:` error or warning of a lost host, and its losses and final weights equal the serial run's
# in float64 at 1e-9 relative. The test fails if the links dropped no packet, or if the shortest
# of 20 round trips between the hosts took less than the 2 ms the delay makes. The times of the
# same dp 2 x tp 2 run on clean links and on lossy ones are printed, and decide nothing.
# Exits 77 (ctest: skipped) with the reason where namespaces or TAP devices (/dev/net/tun) cannot be
# made; fails without nftables.
#   usage: lossy.sh LOOM
set -euo pipefail
source "$(dirname "$0")/cluster_test.sh"
cluster_test looml 10.73.0 "$1"
cd "$work"
fail() { echo "FAIL: $*"; [ -s err.txt ] && tail -20 err.txt; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
tiny_model --quiet --set train.global_batch=8 --set train.micro_batch=1 --set train.steps=8

"$loom" train "${tiny[@]}" --set checkpoint.dir=serial --metrics serial.jsonl 2> err.txt || fail "the serial run"
"$loom" ckpt export serial --dtype float64 --out serial.safetensors > /dev/null

# on NAME CLUSTER_OPTIONS -- TRAIN_ARGS...: `loom train` on 2 hosts x 2 ranks; prints its time.
on() {
  local name=$1 up=() rc=0 t0
  shift
  while [ "$1" != "--" ]; do up+=("$1"); shift; done
  shift
  "$cluster" up 2 --slots 2 "${up[@]}" > /dev/null || rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  t0=$(now)
  "$cluster" mpirun -np 4 "$loom" train "${tiny[@]}" "$@" --set checkpoint.dir="$name" --metrics "$name.jsonl" \
    2> err.txt || fail "$name: loom train $*"
  echo "$name: $(since "$t0") s, $("$cluster" dropped) packets dropped"
  if grep -q "^loom: \(error\|warning\)" err.txt; then fail "$name: a loom error or warning"; fi
  "$loom" ckpt export "$name" --dtype float64 --out "$name.safetensors" > /dev/null
  "$root/tests/netns/same_weights.py" "$name" "$name.safetensors" serial.safetensors "$name.jsonl" serial.jsonl ||
    fail "$name differs from the serial run"
}

on clean --rate 1gbit -- --set parallel.dp=2 --set parallel.tp=2
# Namespaces work (the clean run ran): nftables missing is a missing install step, not a reason to skip.
command -v nft > /dev/null || fail "nft is not installed; hint: scripts/install-deps.sh installs nftables"
on lossy-dp2-tp2 --rate 1gbit --delay 1ms --loss 5 -- --set parallel.dp=2 --set parallel.tp=2
[ "$("$cluster" dropped)" -gt 0 ] || fail "the lossy links dropped no packet"
trip=$("$root/tests/netns/round_trip.py" "$LOOM_CLUSTER-h1" "$LOOM_CLUSTER-h2" "$LOOM_CLUSTER_SUBNET.2") ||
  fail "no round trip between the hosts"
echo "the shortest round trip between the hosts: $trip ms (the delay's floor: 2 ms)"
awk -v t="$trip" 'BEGIN { exit !(t >= 2) }' || fail "a round trip took $trip ms, under the 2 ms of --delay 1ms"
on lossy-pp2-dp2 --rate 1gbit --delay 1ms --loss 5 -- --set parallel.pp=2 --set parallel.dp=2
[ "$("$cluster" dropped)" -gt 0 ] || fail "the lossy links dropped no packet"

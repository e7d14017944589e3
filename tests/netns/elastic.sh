#!/usr/bin/env bash
# NOTE [Elastic restart] on the test cluster (NOTE [Test cluster]): 2 hosts x 2 ranks profiled as a
# cluster (`loom profile --cluster-out` across the hosts), then scripts/launch-elastic.sh trains
# 12 steps with a checkpoint every 2 and each start's layout from `loom plan` on that cluster. Rank
# 2 (host 2) stops at step 6 (LOOM_FAULT hang: the run waits there, whatever the machine's speed),
# once the checkpoint of step 6 is written host 2 freezes (link down, processes stopped: a power
# cut), the heartbeat ends the run, host 2 does not answer the script's probe, and the script
# starts again on host 1 alone (2 ranks) with --resume auto, which finishes the run. Its final
# weights equal the uninterrupted serial run's in float64 at 1e-9 relative.
# Exits 77 (ctest: skipped) with the reason where namespaces cannot be made.
#   usage: elastic.sh LOOM
set -euo pipefail
source "$(dirname "$0")/cluster_test.sh"
cluster_test loome 10.74.0 "$1"
cd "$work"
fail() { echo "FAIL: $*"; for f in err.txt elastic.txt; do [ -s $f ] && { echo "--- $f"; tail -25 $f; }; done; exit 1; }
tiny_model --set train.global_batch=8 --set train.micro_batch=2 --set train.steps=12

"$loom" train "${tiny[@]}" --quiet --set checkpoint.dir=serial 2> err.txt || fail "the serial run"
"$loom" ckpt export serial --dtype float64 --out serial.safetensors > /dev/null

rc=0
"$cluster" up 2 --slots 2 > /dev/null || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
"$cluster" mpirun -np 4 "$loom" profile "${tiny[@]}" --cluster-out hosts.toml > profile.txt 2> err.txt ||
  fail "loom profile --cluster-out across the hosts"
grep -q '^per_node = 2$' hosts.toml && grep -q '^max_nodes = 2$' hosts.toml || fail "hosts.toml is not 2 nodes x 2: $(cat hosts.toml)"
echo "ok: profiled: $(grep -E '^(source|intra_node|inter_node) ' hosts.toml | tr '\n' ' ')"

( LOOM="$loom" LOOM_FAULT="rank=2,step=6,kind=hang" "$root/scripts/launch-elastic.sh" \
    --hostfile "$LOOM_CLUSTER_DIR/hostfile" --launcher "$cluster mpirun" --cluster hosts.toml --probe-s 15 -- \
    "${tiny[@]}" --set checkpoint.dir=ck --set checkpoint.every=2 > elastic.txt 2>&1 && echo 0 > rc.tmp ||
    echo $? > rc.tmp; mv rc.tmp rc.txt ) &
for _ in $(seq 1200); do [ -e ck/step-0000006/manifest.json ] || [ -e rc.txt ] && break; sleep 0.1; done
[ -e ck/step-0000006/manifest.json ] || fail "no checkpoint of step 6 within 120 s"
ip link set "${LOOM_CLUSTER}v2" down
ip netns pids "$LOOM_CLUSTER-h2" | xargs -r kill -STOP
for _ in $(seq 2400); do [ -e rc.txt ] && break; sleep 0.1; done
[ -e rc.txt ] || fail "launch-elastic.sh had not ended 240 s after host 2 froze"
[ "$(cat rc.txt)" -eq 0 ] || fail "launch-elastic.sh exited $(cat rc.txt)"
grep -q "no heartbeat from host $LOOM_CLUSTER-h2 (ranks 2, 3)" elastic.txt || fail "no heartbeat line"
grep -q "host 10.74.0.2 .*does not answer" elastic.txt || fail "host 2 was not found gone"
grep -q "start 2 on 1 host(s), 2 ranks" elastic.txt || fail "no second start on 1 host"
grep -q "resumed from ck/step-0000006 at step 6" elastic.txt || fail "the second start did not resume from step 6"
"$loom" ckpt export ck --dtype float64 --out elastic.safetensors > /dev/null
"$root/tests/netns/same_weights.py" "after losing host 2 at step 6, the weights" elastic.safetensors \
  serial.safetensors || fail "the elastic run's weights differ from the serial run's"
grep -E "launch-elastic|no heartbeat" elastic.txt

#!/usr/bin/env bash
# NOTE [Heartbeat] from the outside: faults between hosts of the test cluster (NOTE [Test cluster]).
# A training run with a checkpoint every 2 steps, under the cluster's mpirun; once a checkpoint is
# written, a fault:
#   link   2 hosts x 2 ranks (dp 4): host 2's link goes down;
#   host   3 hosts x 1 rank (dp 3): host 3 vanishes as in a power cut: its link down, its
#          processes frozen (SIGSTOP), so that nothing of it reaches the others, not even the end of
#          its connections that a killed process's kernel would send (the cluster's `down` kills
#          them). Its rank counts as gone.
#   cut13  3 hosts x 1 rank: hosts 1 and 3 no longer reach each other (nftables drops what each
#          receives from the other); host 2 still reaches both, and the launcher all three.
#   cut23  the same between hosts 2 and 3: neither side prints (each hears host 1, lower), so
#          host 1 reports what one of them told it (NOTE [Heartbeat]).
# Each must end every rank of every host, with one `loom: error:` line on the launcher's output
# naming the reporting rank and host and the lost host and its ranks; the metrics file holds only
# whole records (closed, NOTE [Live output files]); the latest checkpoint verifies. The times from
# the fault to the line, to the launcher's end and to the last rank's end are printed; the test
# waits for each event under a limit of 120 s (60 s for the last), and no time decides a result.
#   usage: faults.sh LOOM
set -euo pipefail
source "$(dirname "$0")/cluster_test.sh"
cluster_test loomf 10.76.0 "$1"
fail() { echo "FAIL: $*"; for f in "$work"/err.txt "$work"/out.txt; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
# The loom processes still running in the cluster's hosts, but for host $1 (0: none).
survivors() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$LOOM_CLUSTER-h[0-9]+$" | grep -vx "$LOOM_CLUSTER-h$1"); do
    ip netns pids "$ns" | xargs -r ps -o comm= -p | grep -c '^loom$' || true
  done | awk '{ n += $1 } END { print n + 0 }'
}

# cut A B: hosts A and B drop what they receive from each other.
cut() {
  local a=$1 b=$2
  local rule='table inet loomcut { chain input { type filter hook input priority 0; ip saddr %s drop; }; }\n'
  # shellcheck disable=SC2059
  printf "$rule" "$LOOM_CLUSTER_SUBNET.$b" | ip netns exec "$LOOM_CLUSTER-h$a" nft -f -
  # shellcheck disable=SC2059
  printf "$rule" "$LOOM_CLUSTER_SUBNET.$a" | ip netns exec "$LOOM_CLUSTER-h$b" nft -f -
}

# run_case NAME HOSTS SLOTS LOST_HOST [EXPECTED]: the run, the fault on host LOST_HOST (cutNM: the
# cut between hosts N and M), the checks; EXPECTED, an extended regular expression, replaces the
# line expected of a lost host.
run_case() {
  local name=$1 hosts=$2 slots=$3 lost=$4 ranks=$(($2 * $3)) pattern=${5:-}
  local rc=0
  "$cluster" up "$hosts" --slots "$slots" >/dev/null || rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  rm -rf "${work:?}"/*
  cd "$work"
  ( "$cluster" mpirun -np "$ranks" "$loom" train -c "$root/configs/gpt-tiny.toml" --quiet --set train.threads=1 \
      --set model.n_layers=2 --set parallel.dp="$ranks" --set train.global_batch=$((4 * ranks)) --set train.steps=100000 \
      --set checkpoint.dir=ck --set checkpoint.every=2 --metrics metrics.jsonl > out.txt 2> err.txt && echo 0 > rc.tmp ||
      echo $? > rc.tmp; mv rc.tmp rc.txt ) &
  for _ in $(seq 1200); do [ -e ck/latest ] || [ -e rc.txt ] && break; sleep 0.1; done
  [ -e ck/latest ] || fail "$name: no checkpoint within 120 s"
  local link="${LOOM_CLUSTER}v$lost" t0
  t0=$(now)
  case "$name" in
    cut*) cut "${name:3:1}" "${name:4:1}" || fail "$name: nft could not cut hosts ${name:3:1} and ${name:4:1} apart";;
    *) ip link set "$link" down;;
  esac
  local gone=0
  [ "$name" = host ] && { gone=$lost; ip netns pids "$LOOM_CLUSTER-h$lost" | xargs -r kill -STOP; }
  local line="" ended=""
  for _ in $(seq 1200); do
    [ -z "$line" ] && grep -q "^loom: error:" err.txt && line=$(since "$t0")
    [ -e rc.txt ] && { ended=$(since "$t0"); break; }
    sleep 0.1
  done
  [ -n "$ended" ] || fail "$name: the launcher had not ended 120 s after the fault"
  echo "$name: the loom line $line s after the fault, the launcher's end $ended s after it (exit code $(cat rc.txt))"
  [ "$(cat rc.txt)" -ne 0 ] || fail "$name: the launcher exited 0 after a lost host"
  # Every rank ended, on every host: those cut off from the launcher end by themselves (NOTE
  # [Heartbeat]: 20 s after the line, or when their host's daemon gives up on the launcher).
  local last=""
  for _ in $(seq 600); do [ "$(survivors $gone)" -eq 0 ] && { last=$(since "$t0"); break; }; sleep 0.1; done
  [ -n "$last" ] || fail "$name: $(survivors $gone) loom processes still run 60 s after the launcher ended"
  echo "$name: every rank ended $last s after the fault"
  local expected lost_ranks
  lost_ranks=$(seq $(((lost - 1) * slots)) $((lost * slots - 1)) | paste -sd, | sed 's/,/, /g')
  [ "$slots" -eq 1 ] && lost_ranks="rank $lost_ranks" || lost_ranks="ranks $lost_ranks"
  expected="loom: error: [rank 0 on $LOOM_CLUSTER-h1] no heartbeat from host $LOOM_CLUSTER-h$lost ($lost_ranks) for 10 s"
  [ "$(grep -c '^loom: error:' err.txt)" -eq 1 ] || fail "$name: not one loom error line"
  if [ -n "$pattern" ]; then
    grep -qE "$pattern" err.txt || fail "$name: expected a line matching: $pattern"
    expected=$(grep '^loom: error:' err.txt)
  else
    grep -qF "$expected" err.txt || fail "$name: expected the line: $expected"
  fi
  python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" metrics.jsonl ||
    fail "$name: the metrics file holds a broken record"
  "$loom" ckpt verify ck > verify.txt 2>&1 || { cat verify.txt; fail "$name: the latest checkpoint does not verify"; }
  echo "ok: $name: every rank ended; $expected ...; the metrics whole; $(head -1 verify.txt)"
  cd "$root"
  "$cluster" down
}

run_case link 2 2 2
run_case host 3 1 3
# Namespaces work (the cases above ran): nftables missing is a missing install step, not a reason to skip.
command -v nft > /dev/null || fail "nft is not installed; hint: scripts/install-deps.sh installs nftables"
run_case cut13 3 1 3
c="$LOOM_CLUSTER"
run_case cut23 3 1 0 "^loom: error: \[rank 0 on $c-h1\] host $c-h(2 has had no heartbeat from host $c-h3 \(rank 2\)|3 has had no heartbeat from host $c-h2 \(rank 1\)) for 10 s"

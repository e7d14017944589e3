#!/usr/bin/env bash
# failure.sh KIND ZERO LOOM CONFIG MPIEXEC...: 4 ranks train (parallel.zero = ZERO); rank 2 fails
# at the start of its second step (LOOM_FAULT step=1, counted from 0) and the job must end on every
# rank with the reason on stderr and exit code 1 (main.cpp: 1 for a failure at run time):
#  - throw: rank 2's error line, and no time-out. The communication time-out is set far past the
#    guard below, so only rank 2's MPI_Abort can end the job.
#  - hang: rank 2 stops taking part (in a non-blocking collective without ZeRO, in a blocking one
#    with it); the other ranks' time-outs (LOOM_COMM_TIMEOUT_S = 20) name the operation that did
#    not complete (a collective cannot tell which peer is missing). Rank 2 prints no error.
# Besides these, the only error lines allowed are the ranks' notes that a peer's process is gone,
# which the teardown of an aborted job makes on whichever ranks are still running.
# The test waits for these events, not for a clock: the only bound is a generous outer time-out
# (120 s) against a job that hangs. After the launcher returns no process of the job may be left.
set -u
kind=$1 zero=$2 loom=$3 config=$4
shift 4
case $kind in
  throw) comm_timeout=1000 ;;
  hang) comm_timeout=20 ;;
  *) echo "FAIL: unknown kind '$kind'"; exit 1 ;;
esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
err=$dir/stderr
fail() { echo "FAIL: $*"; cat "$err"; exit 1; }
. "$(dirname "$0")/../wait.sh"
# Every rank's command line holds $dir (as --metrics), so a rank left behind can be found by it.
timeout -k 5 120 "$@" -n 4 -x LOOM_FAULT="rank=2,step=1,kind=$kind" -x LOOM_COMM_TIMEOUT_S=$comm_timeout \
  "$loom" train -c "$config" --quiet --peak-flops 1e9 --set parallel.dp=4 --set parallel.zero="$zero" \
  --set train.steps=5 --set train.warmup=0 --set model.n_layers=1 --set model.seq_len=64 --set train.global_batch=16 \
  --metrics "$dir/metrics.jsonl" 2>"$err" >/dev/null
rc=$?
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung until the 120 s guard"
# mpiexec returns when every rank has ended; a rank that is still listed is at most being reaped.
wait_until "the job's processes to be gone" none_left "$dir"
[ "$rc" -eq 1 ] || fail "exit code $rc, want 1"
gone='^loom: error: rank [0-9]+ ended unexpectedly \(its process is gone\); ending the job$'
timed_out='^loom: error: \[rank [0-9]+\] .* did not complete within 20 s; a peer rank has probably failed or is stuck$'
case $kind in
  throw)
    reason='^loom: error: \[rank 2\] injected fault at step 1 \(LOOM_FAULT\)$'
    [ "$(grep -cE "$reason" "$err")" -eq 1 ] || fail "want rank 2's error line once"
    ! grep -qE "$timed_out" "$err" || fail "a rank timed out: the abort did not end it" ;;
  hang)
    reason=$timed_out
    grep -qE "$reason" "$err" || fail "no time-out error"
    ! grep -q '^loom: error: \[rank 2\]' "$err" || fail "rank 2, the silent one, printed an error" ;;
esac
others=$(grep '^loom: error: ' "$err" | grep -vE -e "$reason" -e "$gone")
[ -z "$others" ] || fail "unexpected error lines: $others"
echo "ok: $kind ended all ranks with exit code $rc: $(grep -E "$reason" "$err" | head -1)"

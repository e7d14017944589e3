#!/usr/bin/env bash
# failure.sh KIND ZERO LOOM CONFIG MPIEXEC...: 4 ranks train (parallel.zero = ZERO); rank 2 fails
# at step 1 (LOOM_FAULT, kind throw or hang). Every rank must be gone within 30 s, with a non-zero
# exit code and the reason on stderr: the error itself (throw), or a peer's communication time-out
# (hang: in a non-blocking bucket all-reduce without ZeRO, in a blocking collective with it).
set -u
kind=$1 zero=$2 loom=$3 config=$4
shift 4
err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$(date +%s)
timeout -k 5 60 "$@" -n 4 -x LOOM_FAULT="rank=2,step=1,kind=$kind" -x LOOM_COMM_TIMEOUT_S=5 \
  "$loom" train -c "$config" --quiet --peak-flops 1e9 --set parallel.dp=4 --set parallel.zero="$zero" --set train.steps=5 \
  --set model.n_layers=1 --set model.seq_len=64 --set train.global_batch=16 2>"$err" >/dev/null
rc=$?
elapsed=$(( $(date +%s) - start ))
fail() { echo "FAIL: $*"; cat "$err"; exit 1; }
[ "$rc" -ne 0 ] || fail "exit code 0"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung until the 60 s guard"
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s, more than 30"
case $kind in
  throw) grep -q "loom: error: \[rank 2\] injected fault at step 1" "$err" || fail "no error line from rank 2" ;;
  hang) grep -q "did not complete within 5 s" "$err" || fail "no time-out error" ;;
esac
echo "ok: $kind ended all ranks in ${elapsed} s with exit code $rc"

#!/usr/bin/env bash
# one_rank.sh CASE LOOM CONFIG MPIEXEC...: 2 ranks, and a failure that only rank 1 sees.
#  - data: rank 1's data file does not exist (a file missing on one node; the launcher gives each
#    rank its own command line). The ranks agree on the refusal (dist/input_agreement.h): every
#    rank exits 2 by itself (no abort), one `loom: error:` line names rank 1's file, nothing on
#    stdout, and rank 0's outputs (--metrics, --trace, checkpoint.dir) are not written.
#  - config: the same, with rank 1's config file missing (the check in `loom train` itself).
#  - abort: an error at run time on rank 1 alone, after training started (LOOM_FAULT: at the start
#    of its second step), which no other rank knows of: the CLI prints it with its rank and calls
#    MPI_Abort (main.cpp). The job ends with exit code 1, rank 1's line and no process left; other
#    error lines may only note that a peer's process is gone (the aborted job's teardown). The
#    communication time-out is set far past the guard, so rank 0 cannot end the job by timing
#    out: only the abort can.
# A generous outer time-out (120 s) is the only clock, against a job that hangs.
set -u
case=$1 loom=$2 config=$3
shift 3
source "$(dirname -- "${BASH_SOURCE[0]}")/../cli/output_state.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$dir/stdout err=$dir/stderr
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
source "$(dirname -- "${BASH_SOURCE[0]}")/../wait.sh"
common=(train --peak-flops 1e9 --set parallel.dp=2 --set train.steps=3 --set model.n_layers=1
        --set model.seq_len=64 --set train.warmup=0 --metrics "$dir/metrics.jsonl" --trace "$dir/trace.json"
        --set checkpoint.dir="$dir/ckpt")
# Each rank through a shell that records its own exit code: exit.RANK.
each() {
  printf '%s\n' -n 1 bash -c '"$@"; rc=$?; echo $rc >"'"$dir"'/exit.${OMPI_COMM_WORLD_RANK:-$PMIX_RANK}"; exit $rc' \
    rank "$loom" "$@"
}
case $case in
  data|config)
    if [ "$case" = data ]; then
      rank1=("${common[@]}" -c "$config" --set data.source="tokens:$dir/rank1-only.bin")
      want="'$dir/rank1-only.bin' does not exist"
    else
      rank1=("${common[@]}" -c "$dir/rank1-only.toml")
      want="cannot read config file '$dir/rank1-only.toml'"
    fi
    mapfile -t rank0_line < <(each "${common[@]}" -c "$config")
    mapfile -t rank1_line < <(each "${rank1[@]}")
    before=$(output_state "${common[@]}")
    timeout -k 5 120 "$@" "${rank0_line[@]}" : "${rank1_line[@]}" >"$out" 2>"$err"
    rc=$?
    after=$(output_state "${common[@]}")
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung until the 120 s guard"
    [ "$rc" -eq 2 ] || fail "exit code $rc, want 2"
    for r in 0 1; do
      [ "$(cat "$dir/exit.$r" 2>/dev/null)" = 2 ] || fail "rank $r did not exit 2 by itself"
    done
    [ ! -s "$out" ] || fail "stdout is not empty"
    [ "$(grep -c '^loom: error: ' "$err")" -eq 1 ] || fail "want exactly one 'loom: error:' line"
    grep '^loom: error: ' "$err" | grep -qF -- "$want" || fail "the error line lacks \"$want\""
    [ "$before" = "$after" ] || fail "an output changed (- before, + after):
$(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | sed 's/^</-/; s/^>/+/')" ;;
  abort)
    timeout -k 5 120 "$@" -n 2 -x LOOM_FAULT="rank=1,step=1,kind=throw" -x LOOM_COMM_TIMEOUT_S=1000 \
      "$loom" "${common[@]}" -c "$config" --quiet >"$out" 2>"$err"
    rc=$?
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung until the 120 s guard"
    wait_until "the job's processes to be gone" none_left "$dir"
    [ "$rc" -eq 1 ] || fail "exit code $rc, want 1"
    reason='^loom: error: \[rank 1\] injected fault at step 1 \(LOOM_FAULT\)$'
    gone='^loom: error: rank [0-9]+ ended unexpectedly \(its process is gone\); ending the job$'
    [ "$(grep -cE "$reason" "$err")" -eq 1 ] || fail "want rank 1's error line once"
    others=$(grep '^loom: error: ' "$err" | grep -vE -e "$reason" -e "$gone")
    [ -z "$others" ] || fail "unexpected error lines: $others" ;;
  *) fail "unknown case '$case'" ;;
esac
echo "ok: $case: $(grep '^loom: error: ' "$err" | head -1)"

#!/usr/bin/env bash
# interrupt.sh CASE LOOM CONFIG MPIEXEC...: 2 or 3 ranks train; CASE
#   sigterm  the launcher gets SIGTERM (as a batch system's cancel sends it): every rank stops after
#            the same step, one `loom: interrupted at step N by SIGTERM` line, metrics and trace
#            complete under their names, no temporary left;
#   kill9    one rank of 3 is killed with SIGKILL: the job ends, non-zero, with
#            `loom: error: rank R ended unexpectedly`, and the metrics file holds every finished
#            step as whole lines under its own name (NOTE [Live output files]).
# Each wait is for the event itself (tests/wait.sh); only a hang meets its outer limit.
set -u
case=$1 loom=$2 config=$3
shift 3
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; cat err.txt; exit 1; }
. "$(dirname "$0")/../wait.sh"
wait_lines() { wait_until "$1 to hold $2 lines" has_lines "$1" "$2"; }
args=(train -c "$config" --quiet --peak-flops 1e9 --set model.n_layers=1 --set model.seq_len=32 --set model.d_model=32
      --set train.steps=1000000 --set train.threads=1 --metrics m.jsonl)
case $case in
  sigterm)
    "$@" -n 2 "$loom" "${args[@]}" --set parallel.dp=2 --trace t.json >/dev/null 2>err.txt &
    pid=$!
    wait_lines m.jsonl 3
    kill -TERM $pid
    wait_exit $pid "the job after SIGTERM"
    # Each rank exits 143 (128 + SIGTERM, as one process does: cli.run_safety.sigterm); Open MPI's
    # launcher reports a job it stopped on a signal as 1. Success would hide the interrupt.
    [ $rc -ne 0 ] || fail "the launcher exited 0 for an interrupted job"
    [ "$(grep -c '^loom: interrupted at step [0-9]* by SIGTERM (as the launcher passes on a Ctrl-C, or a batch system stops the job); metrics and trace flushed$' err.txt)" -eq 1 ] ||
      fail "want one interrupted line"
    steps=$(sed -nE 's/^loom: interrupted at step ([0-9]+).*/\1/p' err.txt)
    [ "$(wc -l <m.jsonl)" -eq "$steps" ] || fail "metrics hold $(wc -l <m.jsonl) steps, the message says $steps"
    python3 -c 'import json; t = json.load(open("t.json")); assert {e["pid"] for e in t} == {0, 1}' ||
      fail "the trace does not parse with both ranks"
    [ -z "$(ls -A | grep loom-partial)" ] || fail "a temporary was left" ;;
  kill9)
    "$@" -n 3 "$loom" "${args[@]}" --set parallel.dp=3 --set train.global_batch=12 >/dev/null 2>err.txt &
    pid=$!
    wait_lines m.jsonl 3
    victim=$(pgrep -P $pid | sort -n | sed -n 2p)  # the launcher's children are the ranks
    [ -n "$victim" ] || fail "no rank process found"
    kill -9 "$victim"
    wait_exit $pid "the job after a rank's SIGKILL"
    [ $rc -ne 0 ] || fail "exit code 0"
    grep -q '^loom: error: rank [0-9] ended unexpectedly' err.txt || fail "no 'ended unexpectedly' line"
    python3 -c 'import json; s = [json.loads(l)["step"] for l in open("m.jsonl")]; assert s == list(range(1, len(s) + 1)) and len(s) >= 3, s' ||
      fail "m.jsonl does not hold the finished steps as whole lines"
    [ -z "$(ls -A | grep loom-partial)" ] || fail "a temporary was left" ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"

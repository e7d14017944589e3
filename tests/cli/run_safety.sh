#!/usr/bin/env bash
# run_safety.sh LOOM SOURCE_DIR CASE: one of the run-safety contracts of `loom train` (issue 12):
# outputs never alias inputs, the trace is streamed and readable after an interrupt, signals stop
# the run cleanly, a non-finite step stops before the update, memory is checked without a budget,
# the console header is flushed. Each case prints `ok: ...` or `FAIL: ...` (exit 1).
set -u
loom=$1 src=$2 case=$3
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
tiny=$src/configs/gpt-tiny.toml
small=(-c "$tiny" --peak-flops 1e10 --set model.vocab=256 --set model.d_model=32 --set model.n_layers=1
       --set model.seq_len=32 --set train.threads=1)
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -5 $f; }; done; exit 1; }
. "$src/tests/wait.sh"
for i in $(seq 20); do cat "$src/README.md"; done >text.txt
"$loom" data prepare --text text.txt --out tok.bin >/dev/null || fail "data prepare"
data=(--set data.source=tokens:tok.bin)
sum() { sha256sum "$1" | cut -d' ' -f1; }
# The bad-input contract: exit 2, one `loom: error:` line holding PATTERN, FILE unchanged.
refused() {  # refused PATTERN FILE ARGS...
  local pattern=$1 file=$2 before
  shift 2
  before=$(sum "$file")
  "$loom" "$@" >out.txt 2>err.txt &
  wait_exit $! "loom $1"
  [ $rc -eq 2 ] || fail "exit code $rc, want 2"
  [ "$(wc -l <err.txt)" -eq 1 ] && grep -q '^loom: error: ' err.txt || fail "want one loom: error: line"
  grep -qF -- "$pattern" err.txt || fail "no '$pattern'"
  [ "$(sum "$file")" = "$before" ] || fail "$file changed"
  [ -z "$(ls -A | grep loom-partial)" ] || fail "a temporary was left"
}
# Waits until FILE has at least N lines.
wait_lines() { wait_until "$1 to hold $2 lines" has_lines "$1" "$2"; }
# Runs `loom ARGS...` in the background, waits until PARTIAL has LINES lines, sends each of SIGNALS
# (comma-separated) and sets rc to the exit code.
signalled() {  # signalled SIGNALS PARTIAL LINES ARGS...
  local signals=$1 partial=$2 lines=$3 pid s
  shift 3
  "$loom" "$@" >out.txt 2>err.txt &
  pid=$!
  wait_lines "$partial" "$lines"
  for s in ${signals//,/ }; do kill -"$s" $pid; done
  wait_exit $pid "loom after SIG$signals"
}
long=(train "${small[@]}" "${data[@]}" --set train.steps=1000000)
case $case in
  alias_data)
    refused "--metrics 'tok.bin' is the same file as the data file" tok.bin train "${small[@]}" "${data[@]}" --metrics tok.bin
    refused "--trace './tok.bin' is the same file as the data file" tok.bin train "${small[@]}" "${data[@]}" --trace ./tok.bin
    ln tok.bin hard.bin
    refused "is the same file as the data file" tok.bin train "${small[@]}" "${data[@]}" --metrics hard.bin
    ln -s "$dir/tok.bin" link.bin
    refused "is the same file as the data file" tok.bin train "${small[@]}" "${data[@]}" --trace link.bin
    refused "is the same file as the data file's sidecar" tok.bin.json train "${small[@]}" "${data[@]}" --metrics tok.bin.json ;;
  alias_config)
    cp "$tiny" my.toml
    refused "--metrics 'my.toml' is the same file as the config file 'my.toml'" my.toml train -c my.toml --metrics my.toml ;;
  alias_outputs)
    echo keep >m.jsonl
    mkdir -p sub
    refused "--metrics 'm.jsonl' and --trace 'sub/../m.jsonl' are the same file" m.jsonl \
      train "${small[@]}" --metrics m.jsonl --trace sub/../m.jsonl ;;
  trace_directory)
    mkdir adir
    refused "--trace 'adir' is a directory" text.txt train "${small[@]}" --set train.steps=100000 --trace adir
    [ ! -s out.txt ] || fail "refused only after training began"
    refused "--metrics 'adir/' names a directory" text.txt train "${small[@]}" --metrics adir/ ;;
  interrupt)  # SIGINT: one line, exit 130, every output closed; a second signal exits at once
    signalled INT m.jsonl 3 "${long[@]}" --quiet --metrics m.jsonl --trace t.json
    [ $rc -eq 130 ] || fail "exit code $rc, want 130"
    grep -qE '^loom: interrupted at step [0-9]+ by SIGINT; metrics and trace flushed$' err.txt || fail "no message"
    steps=$(sed -E 's/.*at step ([0-9]+).*/\1/' err.txt)
    [ "$(wc -l <m.jsonl)" -eq "$steps" ] || fail "metrics hold $(wc -l <m.jsonl) steps, the message says $steps"
    python3 -c 'import json, sys; t = json.load(open("t.json")); assert isinstance(t, list) and len(t) > 10' ||
      fail "the trace does not parse"
    [ -z "$(ls -A | grep loom-partial)" ] || fail "a temporary was left"
    signalled TERM,TERM m2.jsonl 1 train -c "$tiny" --peak-flops 1e10 --set train.threads=1 \
      --set train.steps=1000 --quiet --metrics m2.jsonl
    [ $rc -eq 143 ] || fail "exit code $rc after two SIGTERMs, want 143" ;;
  sigterm)
    signalled TERM m.jsonl 2 "${long[@]}" --metrics m.jsonl
    [ $rc -eq 143 ] || fail "exit code $rc, want 143"
    grep -qE '^loom: interrupted at step [0-9]+ by SIGTERM' err.txt || fail "no message"
    [ -s m.jsonl ] || fail "no metrics" ;;
  killed)  # SIGKILL: the trace, under its own name, opens as a cut array (NOTE [Live output files])
    "$loom" "${long[@]}" --quiet --trace t.json >out.txt 2>err.txt &
    pid=$!
    events_over() { [ "$(grep -c '"ph":"X"' t.json 2>/dev/null)" -gt "$1" ]; }
    wait_until "t.json to hold 50 events" events_over 50
    kill -9 $pid
    wait $pid 2>/dev/null
    python3 -c '
import json
text = open("t.json").read()
# Each append is one write of whole events: closing the array is all a reader has to do.
events = json.loads(text + "]")
assert len(events) > 50, len(events)
' || fail "the cut trace does not parse"
    [ -z "$(ls -A | grep loom-partial)" ] || fail "a temporary was left"
    "$loom" train "${small[@]}" "${data[@]}" --set train.steps=2 --quiet --trace t.json || fail "rerun"
    python3 -c 'import json; json.load(open("t.json"))' || fail "the rerun's trace is not whole" ;;
  trace_memory)  # the traced run's peak resident memory does not grow with its length
    python3 - "$loom" "${small[@]}" "${data[@]}" <<'PY' || fail "trace memory grows"
import resource, subprocess, sys
def peak_mb(steps):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(sys.argv[1:2] + ["train"] + sys.argv[2:] + ["--quiet", "--set", f"train.steps={steps}",
                   "--trace", f"t{steps}.json"], check=True)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, before
short, _ = peak_mb(200)
long, _ = peak_mb(3000)
print(f"peak RSS: {short:.1f} MB after 200 traced steps, {long:.1f} MB after 3000")
assert long - short < 30, (short, long)
PY
    ;;
  nonfinite)
    "$loom" train "${small[@]}" "${data[@]}" --set train.steps=10 --set train.lr=1e30 --set train.clip=0 \
      --set train.warmup=0 --metrics m.jsonl >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 1 ] || fail "exit code $rc, want 1"
    [ "$(wc -l <err.txt)" -eq 1 ] || fail "want one line"
    grep -q '^loom: error: step 2: the loss is .*nan.* stopped before the optimizer applied it' err.txt || fail "message"
    [ "$(wc -l <m.jsonl)" -eq 1 ] || fail "metrics should hold step 1 only" ;;
  memory)
    refused "the run does not fit this machine" text.txt train -c "$tiny" --set model.n_layers=100000
    grep -q "model.n_layers = 100000" err.txt || fail "the message names no key"
    refused "model.vocab = 2000000000" text.txt train -c "$tiny" --set model.vocab=2000000000
    refused "the run does not fit this machine" text.txt config --check -c "$tiny" --set model.n_layers=20000 ;;
  header)  # the header reaches a file before the first step ends (LOOM_FAULT holds step 1)
    LOOM_FAULT="rank=0,step=0,kind=hang" "$loom" train "${small[@]}" "${data[@]}" >out.txt 2>err.txt &
    pid=$!
    wait_until "the header in out.txt" grep -q '^loom: .* parameters' out.txt
    kill -9 $pid ;;
  numbering)  # metrics count steps as the progress line does, from 1; a summary ends the run
    "$loom" train "${small[@]}" "${data[@]}" --set train.steps=3 --metrics m.jsonl >out.txt 2>err.txt || fail "run"
    python3 -c 'import json; s = [json.loads(l)["step"] for l in open("m.jsonl")]; assert s == [1, 2, 3], s' ||
      fail "metrics steps"
    grep -q '^step 3/3' out.txt || fail "progress"
    grep -q '^loom: done: 3 steps, 768 tokens in .* final loss [0-9.]*; metrics: m.jsonl$' out.txt || fail "summary" ;;
  warning)  # legal but odd: one warning line, the run goes on; refused input prints no warning
    "$loom" train "${small[@]}" "${data[@]}" --set train.steps=3 --set train.warmup=10 --quiet >out.txt 2>err.txt ||
      fail "run"
    grep -q '^loom: warning: train.warmup (10) .* train.steps (3)' err.txt || fail "no warning"
    "$loom" config -c "$tiny" --set train.steps=3 >out.txt 2>err.txt || fail "config"
    grep -q '^loom: warning: train.warmup' err.txt || fail "config prints no warning"
    refused "parallel.bucket_mb = 0 must be positive" text.txt train -c "$tiny" --set train.steps=3 --set parallel.bucket_mb=0 ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"

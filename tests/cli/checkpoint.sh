#!/usr/bin/env bash
# checkpoint.sh LOOM SOURCE_DIR CASE [MPIEXEC...]: the checkpoint contracts of `loom train` (issue 15,
# NOTE [Checkpoints], NOTE [Atomic checkpoints], NOTE [Resuming]) seen from the command line. The
# cases that need 2 ranks get the launcher as MPIEXEC... (run as `MPIEXEC... -n 2 LOOM ...`).
#   kill           a 2-rank job killed (SIGKILL) half way through a save: `latest` still names the
#                  previous checkpoint, the half-written one is no checkpoint, and --resume auto
#                  continues to the end with the uninterrupted run's losses and final checkpoint
#   preempt        SIGTERM to every rank, as a batch system preempts a job: a checkpoint of the
#                  step it stopped at, `latest` names it, and the resumed run continues bit-identically
#   async          checkpoint.async = true writes the same checkpoints as false; resuming from one
#                  continues bit-identically
#   keep           checkpoint.keep = 2 leaves the 2 newest; a stale partial save is removed, the
#                  user's own files in the directory are not; --resume auto of a finished run
#                  trains nothing, changes nothing and exits 0
#   killed         SIGKILL of either rank of a 2-rank job (NOTE [Live output files]): the metrics file
#                  under its own name holds every finished step, the trace opens (closed by rank 0
#                  when its peer died); --resume auto keeps the records up to the checkpoint, byte for
#                  byte, and continues with the uninterrupted run's losses
#   one_run        a checkpoint folder belongs to one run (NOTE [A checkpoint folder belongs to one
#                  run]): a fresh run into a folder with checkpoints is refused; --trace, --metrics and
#                  an export may not write inside a checkpoint folder or a checkpoint.dir to be
#   resume_layout  saved at 2 ranks (dp = 2), resumed at 1 rank
#   truncated flipped other_model missing_file bad_version not_writable not_checkpoint dir_is_file:
#                  bad input: exit 2, one `loom: error:` line naming the file and what is wrong,
#                  nothing trained, written or removed
# "Bit-identical" is checked three ways: the continued steps' losses and gradient norms equal the
# uninterrupted run's exactly; the final checkpoints' manifests list the same boxes with the same
# checksums (weights and AdamW moments), stored in the same files (the same layout writes the same
# bytes); and `loom ckpt export` writes the same weights file for both. Each case prints
# `ok: ...` or `FAIL: ...` (exit 1). No timing decides a result: waits poll for an event, with a
# 60 s limit only against hangs.
set -u -o pipefail
loom=$1 src=$2 case=$3
shift 3
mpi=("$@")
dir=$(mktemp -d)
job=""  # a launcher in the background, killed with its ranks on exit
kill_job() {  # kill_job PID: SIGKILL to the launcher's children (the ranks) and the launcher
  local ranks
  ranks=$(pgrep -P "$1")
  kill -9 $ranks "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
trap '[ -n "$job" ] && kill_job "$job"; kill -9 $(jobs -p) 2>/dev/null; chmod -R u+w "$dir" 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -s $f ] && { echo "--- $f"; tail -8 $f; }; done; exit 1; }
# A model of a few seconds' training: 85k parameters, float32; the dense table path so that no
# measured choice (parallel.sparse = auto) can differ between two runs.
tiny=(-c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 --set model.n_layers=1 --set model.d_model=64
      --set model.seq_len=32 --set model.vocab=256 --set train.threads=1 --set train.warmup=2
      --set parallel.sparse=off)
train1() { "$loom" train "${tiny[@]}" "$@"; }
train2() { timeout -k 5 90 "${mpi[@]}" -n 2 "$loom" train "${tiny[@]}" --set parallel.dp=2 "$@"; }
# `launch2 ARGS... &`, in the background only: the job's subshell becomes the launcher (exec), so $!
# is the launcher, whose children are the ranks, and a signal to $! reaches it (no `timeout` between;
# the 60 s limit of wait_for and the exit trap guard against hangs). LOOM_FAULT, when set, reaches
# the ranks.
launch2() {
  exec "${mpi[@]}" -n 2 ${LOOM_FAULT:+-x LOOM_FAULT="$LOOM_FAULT"} "$loom" train "${tiny[@]}" --set parallel.dp=2 "$@"
}
# wait_for CONDITION PID: waits (at most 60 s, against hangs) until the shell condition holds; fails
# at once when the job PID ended before it did.
wait_for() {
  for _ in $(seq 600); do
    eval "$1" && return 0
    kill -0 "$2" 2>/dev/null || { wait "$2"; fail "the job ended (exit code $?) before: $1"; }
    sleep 0.1
  done
  fail "waited 60 s for: $1"
}
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
# The boxes of a checkpoint's manifest: one line per box (tensor, dtype, shape, offset, size, file,
# checksum), sorted.
boxes() {
  python3 - "$1/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
rows = sorted(f"{t['name']} {t['dtype']} {t['shape']} {b['offset']} {b['size']} {b['file']} {b['checksum']}"
              for t in m["tensors"] for b in t["boxes"])
assert rows, "no boxes"
print("\n".join(rows))
PY
}
same_checkpoint() {  # same_checkpoint A B: the same tensors, boxes and bytes
  local a b
  a=$(boxes "$1") || fail "cannot read $1/manifest.json"
  b=$(boxes "$2") || fail "cannot read $2/manifest.json"
  [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head -6; fail "$1 and $2 hold different tensors"; }
  [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$1/manifest.json")" = \
    "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$2/manifest.json")" ] ||
    fail "$1 and $2 are at different steps"
}
same_weights() {  # same_weights A B: `loom ckpt export` writes the same file for both (full float32 weights)
  "$loom" ckpt export "$1" --out a.safetensors >/dev/null 2>err.txt || fail "export $1"
  "$loom" ckpt export "$2" --out b.safetensors >/dev/null 2>err.txt || fail "export $2"
  cmp -s a.safetensors b.safetensors || fail "the weights of $1 and $2 differ"
  rm -f a.safetensors b.safetensors
}
# same_steps CONTINUED REFERENCE FIRST LAST: steps FIRST..LAST of both metrics files have exactly the
# same loss and gradient norm (the continued file holds exactly those steps).
same_steps() {
  python3 - "$@" <<'PY' || fail "$1 does not continue $2 exactly"
import json, sys
cont, ref, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def load(path): return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(path))}
c, r = load(cont), load(ref)
assert sorted(c) == list(range(first, last + 1)), f"{cont} holds steps {sorted(c)}"
for s in c:
    assert c[s] == r[s], f"step {s}: {c[s]} continued, {r[s]} uninterrupted"
PY
}
latest_is() { [ "$(cat "$1/latest" 2>/dev/null)" = "$2" ] || fail "$1/latest names '$(cat "$1/latest" 2>/dev/null)', want $2"; }
# A listing of everything under the given paths (type, size, modification time) with each file's
# checksum: a file rewritten with the same bytes, or one made and removed again, changes it too.
snapshot() { find "$@" -printf '%p %y %s %T@\n' | sort; find "$@" -type f -exec sha256sum {} + | sort; }
# refused PATTERN ARGS...: `loom train ARGS... --metrics m.jsonl` under the bad-input contract: exit 2,
# nothing on stdout, one `loom: error:` line matching PATTERN (grep -E), no metrics, and nothing
# under the paths in $watch changed.
refused() {
  local pattern=$1 before rc
  shift
  before=$(snapshot "${watch[@]}")
  "${as_user[@]}" "$loom" train "${tiny[@]}" "$@" --metrics m.jsonl >out.txt 2>err.txt
  rc=$?
  check_refused "$pattern" "$rc" "$before"
}
# What runs loom in refused(): as it is, or (not_writable as root) without the capabilities that let
# root pass over permissions, so that a directory without write permission binds it as any user.
as_user=()
refused2() {  # the same with 2 ranks: the job prints one line on behalf of every rank
  local pattern=$1 before rc
  shift
  before=$(snapshot "${watch[@]}")
  train2 "$@" --metrics m.jsonl >out.txt 2>err.txt
  rc=$?
  # The launcher adds its own report of a rank's exit code: only loom's lines are counted.
  grep '^loom: \|^step ' out.txt >loom-out.txt
  grep '^loom: \|^step ' err.txt >loom-err.txt
  mv loom-out.txt out.txt
  mv loom-err.txt err.txt
  check_refused "$pattern" "$rc" "$before"
}
check_refused() {
  [ "$2" -eq 2 ] || fail "exit code $2, want 2"
  [ ! -s out.txt ] || fail "stdout is not empty"
  [ "$(wc -l <err.txt)" -eq 1 ] && grep -q '^loom: error: ' err.txt || fail "want one loom: error: line"
  grep -qE -- "$1" err.txt || fail "the error line lacks /$1/"
  [ ! -e m.jsonl ] && [ ! -e .m.jsonl.loom-partial ] || fail "a refused run wrote metrics"
  [ "$(snapshot "${watch[@]}")" = "$3" ] || fail "a refused run changed ${watch[*]}"
  echo "refused: $(cat err.txt)"
}
# A 1-rank checkpoint directory D: steps 2 and 4 (train.steps 4), for the bad-input cases.
saved() { train1 --set train.steps=4 --set checkpoint.dir=D --set checkpoint.every=2 >out.txt 2>err.txt || fail "save"; }
more=(--set checkpoint.dir=D --set train.steps=8)
case $case in
  kill|killed|preempt|async|resume_layout|missing_file) [ ${#mpi[@]} -gt 0 ] || fail "case $case needs MPIEXEC" ;;
esac
# rank_pid JOB R: the process of world rank R among the launcher JOB's children.
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    grep -qx "OMPI_COMM_WORLD_RANK=$2" <<<"$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)" && { echo "$p"; return 0; }
  done
  return 1
}
# trace_opens FILE [closed]: the trace parses as JSON, as written (closed) or as a cut array.
trace_opens() {
  python3 - "$@" <<'PY' || fail "the trace $1 does not open"
import json, sys
text = open(sys.argv[1]).read()
events = json.loads(text if len(sys.argv) > 2 else text + "]")
assert any(e.get("ph") == "X" for e in events), "no events"
PY
}

case $case in
  kill)
    train2 --set train.steps=10 --set checkpoint.dir=R --set checkpoint.every=2 --metrics r.jsonl >out.txt 2>err.txt ||
      fail "the uninterrupted run"
    # Rank 1 stops after writing its file of the checkpoint of step 4; the job is killed then.
    LOOM_FAULT="rank=1,step=4,kind=save-hang" launch2 --set train.steps=10 --set checkpoint.dir=D \
      --set checkpoint.every=2 --metrics k.jsonl >out.txt 2>err.txt &
    job=$!
    wait_for "[ -e D/.step-0000004.partial/rank-00001.safetensors ]" $job
    kill_job $job
    job=""
    latest_is D step-0000002
    [ -f D/step-0000002/manifest.json ] || fail "step 2 is not complete"
    [ ! -e D/step-0000004 ] || fail "a half-written save is under a step name"
    [ -d D/.step-0000004.partial ] || fail "the half-written save is gone"
    train2 --set train.steps=10 --set checkpoint.dir=D --set checkpoint.every=2 --resume auto --metrics c.jsonl \
      --set checkpoint.keep=10 >out.txt 2>err.txt || fail "the resumed run"
    grep -q '^loom: resumed from D/step-0000002 at step 2 ' out.txt || fail "the header does not say 'resumed from'"
    same_steps c.jsonl r.jsonl 3 10
    same_checkpoint D/step-0000010 R/step-0000010
    same_weights D/step-0000010 R/step-0000010
    latest_is D step-0000010
    [ ! -e D/.step-0000004.partial ] || fail "the stale partial save was left" ;;
  preempt)
    # A batch system preempts a job by sending SIGTERM to every task (Slurm: then KillWait, 30 s, before
    # SIGKILL); so does this test, to both ranks. SIGTERM to Open MPI's launcher (4.1) would reach the
    # ranks 1 s late and be followed by SIGKILL 1 s after it (odls_base_sigkill_timeout): whether the
    # step, the save and the flush fit in that second is timing, which no test may depend on.
    long=(--set train.steps=100000 --set checkpoint.dir=D)
    launch2 "${long[@]}" --metrics p.jsonl --trace t.json >out.txt 2>err.txt &
    job=$!
    # While the job runs, its outputs are there under their names: loom plot draws the metrics and
    # the trace opens as the cut array it is until the end.
    wait_for '[ "$(lines p.jsonl)" -ge 3 ]' $job
    "$loom" plot p.jsonl --out live.svg >plot.txt 2>&1 || { cat plot.txt; fail "loom plot of the running job"; }
    grep -q '<svg' live.svg || fail "live.svg is no SVG"
    trace_opens t.json
    ranks=$(pgrep -P $job)
    [ "$(echo $ranks | wc -w)" -eq 2 ] || fail "want 2 rank processes, found: $ranks"
    kill -TERM $ranks
    wait $job
    rc=$?
    job=""
    [ $rc -eq 143 ] || fail "exit code $rc, want 143"
    grep -qE '^loom: interrupted at step [0-9]+ by SIGTERM \(as the launcher passes on a Ctrl-C, or a batch system stops the job\); metrics and trace flushed; checkpoint: D/step-[0-9]{7}$' \
      err.txt || fail "no interrupted line naming the checkpoint"
    k=$(sed -nE 's/^loom: interrupted at step ([0-9]+) .*/\1/p' err.txt)
    name=$(printf 'step-%07d' "$k")
    grep -q "checkpoint: D/$name\$" err.txt || fail "the message names another checkpoint than step $k"
    latest_is D "$name"
    [ -f "D/$name/manifest.json" ] || fail "D/$name is not complete"
    [ "$(lines p.jsonl)" -eq "$k" ] || fail "metrics hold $(lines p.jsonl) steps, the message says $k"
    trace_opens t.json closed
    # The cosine schedule spans train.steps: the continued and the uninterrupted run both keep
    # train.steps and stop after step k + 4 (--stop-after saves a checkpoint there).
    end=$((k + 4))
    train2 "${long[@]}" --resume auto --stop-after $end --metrics c.jsonl >out.txt 2>err.txt || fail "the resumed run"
    grep -q "^loom: resumed from D/$name at step $k " out.txt || fail "the header does not say 'resumed from'"
    grep -q "^loom: stopped after step $end of 100000 (--stop-after); checkpoint: D/$(printf 'step-%07d' $end)\$" out.txt ||
      fail "no 'stopped after' line naming the checkpoint"
    train2 --set train.steps=100000 --set checkpoint.dir=R --stop-after $end --metrics r.jsonl >out.txt 2>err.txt ||
      fail "the uninterrupted run"
    same_steps c.jsonl r.jsonl $((k + 1)) $end
    same_checkpoint "D/$(printf 'step-%07d' $end)" "R/$(printf 'step-%07d' $end)"
    same_weights "D/$(printf 'step-%07d' $end)" "R/$(printf 'step-%07d' $end)"
    latest_is D "$(printf 'step-%07d' $end)" ;;
  async)
    every=(--set train.steps=10 --set checkpoint.every=2 --set checkpoint.keep=10)
    train2 "${every[@]}" --set checkpoint.dir=S --metrics s.jsonl >out.txt 2>err.txt || fail "the synchronous run"
    train2 "${every[@]}" --set checkpoint.dir=A --set checkpoint.async=true >out.txt 2>err.txt || fail "the async run"
    [ "$(ls -A A)" = "$(ls -A S)" ] || fail "A holds $(ls -A A | tr '\n' ' '), S $(ls -A S | tr '\n' ' ')"
    for s in 2 4 6 8 10; do same_checkpoint "A/$(printf 'step-%07d' $s)" "S/$(printf 'step-%07d' $s)"; done
    latest_is A step-0000010
    train2 "${every[@]}" --set checkpoint.dir=C --set checkpoint.async=true --resume A/step-0000004 \
      --metrics c.jsonl >out.txt 2>err.txt || fail "the run resumed from an async checkpoint"
    grep -q '^loom: resumed from A/step-0000004 at step 4 ' out.txt || fail "the header does not say 'resumed from'"
    same_steps c.jsonl s.jsonl 5 10
    same_checkpoint C/step-0000010 S/step-0000010
    same_weights C/step-0000010 S/step-0000010
    same_checkpoint C/step-0000008 S/step-0000008 ;;
  keep)
    mkdir -p D/.step-0000099.partial D/mine
    echo junk >D/.step-0000099.partial/rank-00000.safetensors
    echo "my notes" >D/notes.txt
    echo "mine" >D/mine/file
    echo "not ours" >D/step-0000001.bak
    before=$(snapshot D/notes.txt D/mine D/step-0000001.bak)
    train1 --set train.steps=6 --set checkpoint.dir=D --set checkpoint.every=1 --set checkpoint.keep=2 \
      >out.txt 2>err.txt || fail "run"
    got=$(ls -A D | tr '\n' ' ')
    [ "$got" = "latest mine notes.txt step-0000001.bak step-0000005 step-0000006 " ] || fail "D holds: $got"
    latest_is D step-0000006
    [ "$(snapshot D/notes.txt D/mine D/step-0000001.bak)" = "$before" ] || fail "the user's files changed"
    # Resuming keeps counting: the next run's checkpoints replace the oldest.
    train1 --set train.steps=8 --set checkpoint.dir=D --set checkpoint.every=1 --set checkpoint.keep=2 --resume auto \
      >out.txt 2>err.txt || fail "resume"
    got=$(ls -A D | tr '\n' ' ')
    [ "$got" = "latest mine notes.txt step-0000001.bak step-0000007 step-0000008 " ] || fail "after resuming, D holds: $got"
    [ "$(snapshot D/notes.txt D/mine D/step-0000001.bak)" = "$before" ] || fail "the user's files changed"
    # A finished run resumed again (a requeued job whose signal came in its last step) trains
    # nothing, touches nothing and exits 0 (NOTE [A finished run resumes to nothing]).
    echo '{"step": 8}' >m.jsonl
    all=$(snapshot D m.jsonl)
    train1 --set train.steps=8 --set checkpoint.dir=D --set checkpoint.every=1 --set checkpoint.keep=2 --resume auto \
      --metrics m.jsonl >out.txt 2>err.txt || fail "resuming the finished run exited $?"
    grep -q '^loom: the run is complete: checkpoint D/step-0000008 is at its last step (8 of 8); nothing to train' \
      out.txt || fail "no 'the run is complete' line"
    grep -q '^step ' out.txt && fail "a finished run trained"
    [ "$(snapshot D m.jsonl)" = "$all" ] || fail "resuming the finished run changed D or the metrics" ;;
  killed)
    # Rank R stops at the start of step 8 (LOOM_FAULT counts from 0): steps 1-7 are finished and
    # step 6 is the last checkpoint; the other rank waits in step 8's collectives. Then R is killed.
    long=(--set train.steps=100000 --set checkpoint.every=3)
    train2 "${long[@]}" --set checkpoint.dir=R --stop-after 10 --metrics r.jsonl >out.txt 2>err.txt ||
      fail "the uninterrupted run"
    for victim in 0 1; do
      LOOM_FAULT="rank=$victim,step=7,kind=hang" launch2 "${long[@]}" --set checkpoint.dir=K$victim \
        --metrics k$victim.jsonl --trace t$victim.json >out.txt 2>err.txt &
      job=$!
      wait_for "[ \"\$(lines k$victim.jsonl)\" -eq 7 ] && [ -d K$victim/step-0000006 ]" $job
      pid=$(rank_pid $job $victim) || fail "no process of rank $victim"
      kill -9 "$pid"
      wait $job
      rc=$?
      job=""
      [ $rc -ne 0 ] || fail "the job whose rank $victim was killed exited 0"
      [ ! -e .k$victim.jsonl.loom-partial ] || fail "a hidden partial metrics file was left"
      python3 -c 'import json,sys; assert [json.loads(l)["step"] for l in open(sys.argv[1])] == list(range(1, 8))' \
        k$victim.jsonl || fail "k$victim.jsonl does not hold steps 1-7 as whole lines"
      if [ $victim -eq 1 ]; then trace_opens t$victim.json closed; else trace_opens t$victim.json; fi
      head -6 k$victim.jsonl >before.jsonl
      train2 "${long[@]}" --set checkpoint.dir=K$victim --resume auto --stop-after 10 --metrics k$victim.jsonl \
        >out.txt 2>err.txt || fail "the resumed run (rank $victim killed)"
      grep -q "^loom: resumed from K$victim/step-0000006 at step 6 " out.txt || fail "not resumed from step 6"
      [ "$(head -6 k$victim.jsonl)" = "$(cat before.jsonl)" ] || fail "the records of steps 1-6 changed"
      tail -n +7 k$victim.jsonl >after.jsonl
      same_steps after.jsonl r.jsonl 7 10
      echo "ok: rank $victim killed at step 8: steps 1-6 kept, 7-10 trained again as the uninterrupted run"
    done ;;
  one_run)
    saved
    watch=(D)
    refused 'checkpoint\.dir = "D" holds the checkpoints of another run \(step-0000002, step-0000004\): a fresh run' \
      "${more[@]}"
    refused "--trace 'D/latest' is in checkpoint\.dir = \"D\"" "${more[@]}" --resume auto --trace D/latest
    refused "--trace 'D/step-0000002/t\.json' is in" --set checkpoint.dir=E --trace D/step-0000002/t.json
    watch=(D new)
    refused "--trace 'new/ck/t\.json' is in checkpoint\.dir = \"new/ck\"" --set checkpoint.dir=new/ck --trace new/ck/t.json
    [ ! -e new ] || fail "a refused run made new/"
    before=$(snapshot D)
    "$loom" ckpt export D/step-0000004 --out D/step-0000002/rank-00000.safetensors >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q "^loom: error: --out 'D/step-0000002/rank-00000.safetensors' is in" err.txt ||
      fail "an export over another step's file: exit $rc"
    [ "$(snapshot D)" = "$before" ] || fail "the refused export changed D"
    train1 "${more[@]}" --resume auto --set checkpoint.every=2 >out.txt 2>err.txt || fail "resuming the folder's run"
    grep -q '^loom: resumed from D/step-0000004 at step 4 ' out.txt || fail "not resumed from D/step-0000004"
    latest_is D step-0000008 ;;
  resume_layout)
    train2 --set train.steps=4 --set checkpoint.dir=D --metrics r2.jsonl >out.txt 2>err.txt || fail "the 2-rank run"
    train2 --set train.steps=8 --set checkpoint.dir=E --resume D/step-0000004 --metrics c2.jsonl >out.txt 2>err.txt ||
      fail "the 2-rank continued run"
    train1 --set train.steps=8 --set checkpoint.dir=D --resume auto --metrics c1.jsonl >out.txt 2>err.txt ||
      fail "the 1-rank resume"
    grep -q '^loom: resumed from D/step-0000004 at step 4 (saved with 2 ranks, dp=2' out.txt ||
      fail "the header does not say 'resumed from ... saved with 2 ranks'"
    grep -q '; 1 rank = dp 1 x tp 1 x pp 1 x sp 1, ' out.txt || fail "the resumed run is not 1 rank"
    latest_is D step-0000008
    # Another layout is the same run up to floating-point reassociation (float32 here).
    python3 - c1.jsonl c2.jsonl <<'PY' || fail "the 1-rank continuation differs from the 2-rank one"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert [r["step"] for r in a] == [5, 6, 7, 8] == [r["step"] for r in b], (a, b)
for x, y in zip(a, b):
    assert abs(x["loss"] - y["loss"]) < 1e-4 * abs(y["loss"]), (x["step"], x["loss"], y["loss"])
PY
    ;;
  truncated)
    saved
    truncate -s -100 D/step-0000004/rank-00000.safetensors
    watch=(D)
    refused 'checkpoint D/step-0000004: file rank-00000\.safetensors has [0-9]+ bytes, the manifest says [0-9]+' \
      "${more[@]}" --resume auto
    refused 'checkpoint D/step-0000004: file rank-00000\.safetensors has' "${more[@]}" --resume D/step-0000004 ;;
  flipped)
    saved
    # One bit of the first tensor's third value, inside the data (the header's length says where).
    python3 - D/step-0000004/rank-00000.safetensors <<'PY' || fail "flip"
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
first = min((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")
data[8 + n + first[0] + 9] ^= 0x10
open(path, "wb").write(data)
print(first[1], file=open("flipped.txt", "w"))
PY
    watch=(D)
    refused "checkpoint file D/step-0000004/rank-00000\.safetensors: tensor $(cut -d@ -f1 flipped.txt) .*fails its checksum" \
      "${more[@]}" --resume auto ;;
  other_model)
    saved
    watch=(D)
    refused 'checkpoint D/step-0000004 was saved from another run: model\.d_model = 32 \(saved: 64\)' \
      "${more[@]}" --resume auto --set model.d_model=32
    refused 'checkpoint D/step-0000004 was saved from another run: model\.n_layers = 2 \(saved: 1\)' \
      "${more[@]}" --resume D/step-0000004 --set model.n_layers=2 ;;
  missing_file)
    train2 --set train.steps=4 --set checkpoint.dir=D >out.txt 2>err.txt || fail "the 2-rank save"
    [ -f D/step-0000004/rank-00001.safetensors ] || fail "rank 1 wrote no file"
    rm D/step-0000004/rank-00001.safetensors
    watch=(D)
    refused 'checkpoint D/step-0000004: file rank-00001\.safetensors is missing' "${more[@]}" --resume auto
    refused2 'checkpoint D/step-0000004: file rank-00001\.safetensors is missing' "${more[@]}" --resume auto ;;
  bad_version)
    saved
    python3 - D/step-0000004/manifest.json <<'PY' || fail "edit"
import json, sys
m = json.load(open(sys.argv[1]))
m["version"] = 99
json.dump(m, open(sys.argv[1], "w"))
PY
    watch=(D)
    refused 'D/step-0000004/manifest\.json: checkpoint format version 99 is not one this loom reads' \
      "${more[@]}" --resume auto ;;
  not_writable)
    mkdir x
    echo "a file" >x/file
    watch=(x)
    refused 'checkpoint\.dir = "x/file/ckpt" cannot be made: .*/x/file is not a directory' \
      --set checkpoint.dir=x/file/ckpt
    mkdir ro ro/ckpt
    chmod a-w ro ro/ckpt
    if [ "$(id -u)" -eq 0 ]; then
      as_user=(setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search)
      "${as_user[@]}" touch ro/probe 2>/dev/null && fail "root without CAP_DAC_OVERRIDE could still write ro/"
    fi
    watch=(ro)
    refused 'checkpoint\.dir = "ro/new" cannot be made: .*/ro is not writable' --set checkpoint.dir=ro/new
    refused 'checkpoint\.dir = "ro/ckpt" is not writable' --set checkpoint.dir=ro/ckpt ;;
  not_checkpoint)
    saved
    mkdir empty junk
    head -c 4096 /dev/urandom >random.bin
    head -c 512 /dev/urandom >junk/manifest.json
    watch=(D empty junk random.bin)
    refused 'empty is not a complete checkpoint: it has no manifest\.json' "${more[@]}" --resume empty
    refused 'random\.bin is not a checkpoint: it is a file, not a directory' "${more[@]}" --resume random.bin
    refused 'junk/manifest\.json is not a valid checkpoint manifest' "${more[@]}" --resume junk
    refused 'checkpoint nowhere does not exist' "${more[@]}" --resume nowhere
    refused 'D is not a complete checkpoint: it has no manifest\.json' "${more[@]}" --resume D ;;
  dir_is_file)
    echo "a file" >F
    watch=(F)
    refused 'checkpoint\.dir = "F" is a file, not a directory' --set checkpoint.dir=F
    refused 'checkpoint\.dir = "F" is a file, not a directory' --set checkpoint.dir=F --resume auto ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"

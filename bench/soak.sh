#!/usr/bin/env bash
# bench/soak.sh [--minutes M] [--out DIR] [--seed N]: one training run carried for M minutes (30) through
# a sequence of `loom train` segments on this machine, each in another layout (dp, tp, pp, sp and
# their mixes, ZeRO-1, interleaved and zero-bubble schedules, the sparse table path, async saves) on
# 1, 2 or 4 ranks, each resuming (--resume auto) the checkpoint the previous one left and training a
# few more steps (--stop-after on one long train.steps, so the LR schedule is the uninterrupted
# run's). Once checkpoints exist, some segments are killed at a random step (SIGKILL to one rank, or
# to the launcher); the next one resumes from the last complete checkpoint. Checks (NOTE [Soak checks]):
#   - every segment continues the run exactly where it resumed: its first 20 steps (those before its
#     kill for a killed one) have the loss and gradient norm (1e-9) and learning rate (1e-12) of a
#     serial run resumed from the same checkpoint;
#   - an uninterrupted serial run (1 rank, the same config, every step the soak trained): the
#     segments together trained every step, with its learning rates (1e-12) and, over the last 100
#     steps, its mean loss (1e-2); the largest loss difference, the final float64 weights' and AdamW
#     moments' (read from the checkpoints' boxes by bench/soak_check.py) and the `loom ckpt export`
#     files' differences are printed as figures;
#   - nothing leaked: no process of the soak's left, the shell's file descriptors as at the start, no
#     file under DIR open, no stale temporary (`.*.loom-partial`, `.step-*.partial`) left, no more
#     than checkpoint.keep checkpoints, no Open MPI file left but by a SIGKILLed launcher.
# Prints a report (also DIR/report.txt): segments, layouts, kills, resumes, steps, wall times, checks.
# Exit 0 when every check passed, 1 otherwise, 2 on bad arguments. DIR (default: a temporary
# directory, removed after a passing run) keeps each segment's output and metrics.
# The model: gpt-tiny shrunk to 2 layers, d_model 64, seq_len 32, vocab 256, float64, one thread per
# rank, the dense table path (no measured choice at start-up).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
loom=$root/build/bin/loom
minutes=30 out="" seed=$(($(date +%s) % 32768))
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=${2:-}; shift 2 || true ;;
    --out) out=${2:-}; shift 2 || true ;;
    --seed) seed=${2:-}; shift 2 || true ;;
    *) echo "soak: error: unknown argument '$1'; usage: bench/soak.sh [--minutes M] [--out DIR] [--seed N]" >&2
       exit 2 ;;
  esac
done
[[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 ]] || { echo "soak: error: --minutes '$minutes' must be a whole number >= 1" >&2; exit 2; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "soak: error: --seed '$seed' must be a whole number" >&2; exit 2; }
[ -x "$loom" ] || { echo "soak: error: $loom is missing; run 'make' first" >&2; exit 2; }
keep_out=1
if [ -z "$out" ]; then out=$(mktemp -d /tmp/loom-soak.XXXXXX) keep_out=0; fi
mkdir -p "$out" && out=$(cd "$out" && pwd)
[ -z "$(ls -A "$out")" ] || { echo "soak: error: --out '$out' is not empty" >&2; exit 2; }
RANDOM=$seed
ckpt=$out/ckpt

# Layouts, taken in turn: NAME RANKS --set KEY=VALUE...
layouts=(
  "dp2 2 parallel.dp=2"
  "tp2 2 parallel.tp=2"
  "pp2 2 parallel.pp=2"
  "sp2-ring 2 parallel.sp=2 parallel.sp_mode=ring"
  "serial 1"
  "dp2xtp2 4 parallel.dp=2 parallel.tp=2"
  "dp2-zero1 2 parallel.dp=2 parallel.zero=1"
  "pp2-interleaved 2 parallel.pp=2 parallel.schedule=interleaved parallel.chunks=2"
  "pp2xdp2 4 parallel.pp=2 parallel.dp=2"
  "sp2-allgather 2 parallel.sp=2"
  "tp2-sequence 2 parallel.tp=2 parallel.tp_sequence=true"
  "pp4 4 parallel.pp=4"
  "sp2-ulysses 2 parallel.sp=2 parallel.sp_mode=ulysses"
  "sp2-ring-x-dp2 4 parallel.sp=2 parallel.sp_mode=ring parallel.dp=2"
  "pp2-zb-h1 2 parallel.pp=2 parallel.schedule=zb-h1"
  "dp4-zero1 4 parallel.dp=4 parallel.zero=1"
  "tp2xpp2 4 parallel.tp=2 parallel.pp=2"
  "dp2-sparse 2 parallel.dp=2 parallel.sparse=on"
  "dp2-async-save 2 parallel.dp=2 checkpoint.async=true"
)
# A segment trains kmin..kmax steps: 20-60 s here (about 20 ms a step; 1-4 s to start). train.steps
# is the steps the segments average in M minutes here, so that the cosine schedule decays over the
# soak; the soak ends at M minutes or at the schedule's last step, whichever comes first. Each segment
# saves every 10-250 steps (a kill then repeats up to that many).
kmin=800 kmax=2400 steps_per_minute=2500 everies=(10 50 100 250)
steps=$((minutes * steps_per_minute))
model=(-c "$root/configs/gpt-tiny.toml" --peak-flops 1e10 --set model.n_layers=2 --set model.d_model=64
       --set model.n_heads=4 --set model.seq_len=32 --set model.vocab=256 --set model.dtype=float64
       --set train.global_batch=8 --set train.micro_batch=2 --set train.threads=1 --set train.steps=$steps
       --set train.warmup=10 --set train.log_every=100 --set parallel.sparse=off)
export OMP_NUM_THREADS=1
segment_limit=600  # seconds a segment may run before it counts as hung

latest_step() { [ -f "$ckpt/latest" ] && sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$ckpt/latest" || echo 0; }
step_name() { printf 'step-%07d' "$1"; }
# The processes of this soak: launchers and ranks, found by their command line (the checkpoint
# directories are under DIR), so other jobs on the machine are never counted or touched.
ours() { pgrep -f -- "checkpoint.dir=$out/" || true; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# The step of the last whole record of a metrics file (0 when none yet).
last_step() { local s; s=$(tail -n 1 "$1" 2>/dev/null | sed -n 's/.*"step":\([0-9][0-9]*\)[,}].*/\1/p'); echo "${s:-0}"; }
failures=()
fail() { failures+=("$*"); echo "soak: FAIL: $*" >&2; }

# wait_for_step FILE STEP PID: 0 once FILE's last record is at STEP or later; 1 when the job PID
# ended first; 2 after segment_limit seconds (a hang).
wait_for_step() {
  local t0=$SECONDS
  while [ "$(last_step "$1")" -lt "$2" ]; do
    kill -0 "$3" 2>/dev/null || return 1
    [ $((SECONDS - t0)) -lt $segment_limit ] || return 2
    sleep 0.05
  done
}
# await PID: the job's exit code; a job past segment_limit is a hang: killed (ranks and launcher), 124.
await() {
  local t0=$SECONDS rc=0
  while kill -0 "$1" 2>/dev/null && [ $((SECONDS - t0)) -lt $segment_limit ]; do sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    kill -9 $(pgrep -P "$1") "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    return 124
  fi
  wait "$1" || rc=$?
  return $rc
}
# settle: every process of the soak has ended, within 60 s of its job's end (Open MPI ends the other
# ranks of a job one of whose ranks was killed; ranks whose launcher was killed must end by
# themselves). Any left is a leak: named, then killed so that it cannot write into the next segment.
settle() {
  local t0=$SECONDS left
  while left=$(ours) && [ -n "$left" ] && [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.2; done
  [ -z "$left" ] && return 0
  fail "$1: processes left 60 s after the job ended: $(ps -o pid=,args= -p "$(echo $left | tr ' ' ,)" | cut -c1-120 | tr '\n' ';')"
  kill -9 $left 2>/dev/null || true
}

# mpi_leftovers TAG: Open MPI's files the segment's job left (its session directory, its shared-memory
# segments). A launcher killed by SIGKILL cannot remove them: those are counted (and removed, so the
# next segments start clean); any other job's are a leak.
mpi_leftovers() {
  local files
  files=$( (find "$out/ompi" -mindepth 2 -maxdepth 2 -name 'pid.*'; find "$shm" -mindepth 1) | tr '\n' ' ')
  [ -n "$files" ] || return 0
  if [ "$kill_mode" = launcher ]; then
    mpi_left_dirs=$((mpi_left_dirs + $(find "$out/ompi" -mindepth 2 -maxdepth 2 -name 'pid.*' | wc -l)))
    mpi_left_shm=$((mpi_left_shm + $(find "$shm" -mindepth 1 | wc -l)))
    mpi_left_bytes=$((mpi_left_bytes + $(find "$shm" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')))
  else
    fail "$1: Open MPI's files left after the job ended: $files"
  fi
  rm -rf $files
}
# run_segment INDEX LAYOUT: one segment in LAYOUT ("NAME RANKS KEY=VALUE..."): resumes the latest
# checkpoint and trains to a step kmin..kmax further, or is killed at a random step on the way
# (one segment in three, once a checkpoint exists). Appends its row to DIR/segments.tsv.
run_segment() {
  local i=$1 name ranks rest sets=() s start end every kill_mode=- target=0 rc=0 pid t0 tag after
  read -r name ranks rest <<<"$2"
  for s in $rest; do sets+=(--set "$s"); done
  start=$(latest_step)
  end=$((start + kmin + RANDOM % (kmax - kmin + 1)))
  [ $end -le $steps ] || end=$steps
  every=${everies[RANDOM % ${#everies[@]}]}
  if [ "$start" -gt 0 ] && [ $((RANDOM % 3)) -eq 0 ] && [ $((end - start)) -ge 2 ]; then
    if [ $((RANDOM % 2)) -eq 0 ]; then kill_mode=rank; else kill_mode=launcher; fi
    target=$((start + 1 + RANDOM % (end - start - 1)))
  fi
  tag=$(printf 'seg-%03d' "$i")
  t0=$(now_ms)
  boundary_run "$tag" "$start" "$end"
  # The subshell execs scripts/mpirun.sh, which execs mpirun: $! is the launcher, its children the ranks.
  (cd "$out" && exec "$root/scripts/mpirun.sh" "$ranks" "$loom" train "${model[@]}" "${sets[@]}" \
    --set checkpoint.dir="$ckpt" --set checkpoint.every="$every" --resume auto --stop-after "$end" \
    --metrics "$out/$tag.jsonl" >"$out/$tag.out" 2>"$out/$tag.err") &
  pid=$!
  [ "$kill_mode" = - ] || kill_at "$tag" "$target" "$pid"
  await "$pid" || rc=$?
  settle "$tag"
  mpi_leftovers "$tag"
  after=$(latest_step)
  check_segment "$tag" "$start" "$end" "$rc"
  boundary_check "$tag" "$start" "$end"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$name" "$ranks" "$start" "$end" "$every" "$kill_mode" \
    "$killed_after" "$rc" "$after" "$((($(now_ms) - t0) / 1000))" >>"$out/segments.tsv"
  printf '%s %-16s %d ranks  steps %5d..%-5d every %-2d  %-28s exit %-3s latest %s  %ss\n' "$tag" "$name" "$ranks" \
    "$((start + 1))" "$end" "$every" "$(describe_kill)" \
    "$rc" "$after" "$((($(now_ms) - t0) / 1000))"
}
# boundary_run TAG START END: the serial reference of the segment's first steps (NOTE [Soak checks]):
# 1 rank resumed from the same checkpoint (or fresh at START 0), `boundary` steps, metrics
# DIR/check-TAG.jsonl; its checkpoint is removed.
boundary=20
boundary_run() {
  local n=$(($3 - $2 < boundary ? $3 - $2 : boundary)) from=() rc=0
  [ "$2" -eq 0 ] || from=(--resume "$ckpt/$(step_name "$2")")
  (cd "$out" && exec "$loom" train "${model[@]}" --set checkpoint.dir="$out/check" "${from[@]}" \
    --stop-after $(($2 + n)) --metrics "$out/check-$1.jsonl" >"$out/check-$1.out" 2>&1) || rc=$?
  rm -rf "$out/check"
  [ $rc -eq 0 ] || fail "$1: the serial reference of its first steps: exit code $rc"
}
# boundary_check TAG START END: the segment's first steps equal the reference's; a segment that ran
# to its end has them all, a killed one those before its kill.
boundary_check() {
  local file=$out/$1.jsonl minimum=$(($3 - $2 < boundary ? $3 - $2 : boundary))
  [ -f "$file" ] || file=$out/$1.killed.jsonl minimum=0
  [ -f "$file" ] || return 0
  local line rc=0
  line=$(python3 "$root/bench/soak_check.py" boundary "$out/check-$1.jsonl" "$file" "$minimum" 2>&1) || rc=$?
  echo "$1 $line" >>"$out/boundaries.txt"
  [ $rc -eq 0 ] || fail "$1: $line"
}
# kill_at TAG STEP PID: once the segment's metrics hold STEP, SIGKILL to one of its ranks (chosen at
# random) or to its launcher. Sets kill_mode to "missed" when the segment ended first.
kill_at() {
  local victims=() w=0
  wait_for_step "$out/.$1.jsonl.loom-partial" "$2" "$3" || w=$?
  if [ $w -ne 0 ]; then kill_mode=missed; return; fi
  if [ "$kill_mode" = rank ]; then
    victims=($(pgrep -P "$3" || true))  # the ranks (named "exe", not "loom", in ps)
    [ ${#victims[@]} -gt 0 ] && kill -9 "${victims[RANDOM % ${#victims[@]}]}" 2>/dev/null || kill_mode=missed
  else
    kill -9 "$3" 2>/dev/null || kill_mode=missed
  fi
}
describe_kill() {
  case $kill_mode in
    -) echo "ran to its end" ;;
    missed) echo "ran to its end (kill missed)" ;;
    *) echo "SIGKILL to the $kill_mode after step $killed_after" ;;
  esac
}
# check_segment TAG START END RC: what the segment must have done. A segment that ran to its end
# exited 0, said it resumed from the checkpoint of START (none when START is 0), left `latest` at END
# and metrics of steps START+1..END. A killed one left `latest` between START and END and no
# metrics file; its metrics' temporary (which SIGKILL leaves behind by nature) becomes TAG.killed.jsonl
# for the loss check, and killed_after is its last step.
check_segment() {
  local tag=$1 start=$2 end=$3 rc=$4 after partial="$out/.$1.jsonl.loom-partial"
  after=$(latest_step) killed_after=-
  # A signal that came as the job was ending (its victim already exited) killed nothing.
  if [ "$rc" -eq 0 ] && [ -e "$out/$tag.jsonl" ] && [ "$after" -eq "$end" ]; then [ "$kill_mode" = - ] || kill_mode=missed; fi
  if [ "$kill_mode" = rank ] || [ "$kill_mode" = launcher ]; then
    killed_after=$(last_step "$partial")
    [ "$rc" -ne 0 ] || fail "$tag: exit code 0 after SIGKILL to the $kill_mode"
    [ "$after" -ge "$start" ] && [ "$after" -le "$end" ] || fail "$tag: latest is step $after, want $start..$end"
    [ ! -e "$out/$tag.jsonl" ] || fail "$tag: a killed run committed its metrics"
    [ ! -e "$partial" ] || mv "$partial" "$out/$tag.killed.jsonl"
    return
  fi
  [ "$rc" -eq 0 ] || { fail "$tag: exit code $rc: $(grep -m1 'error' "$out/$tag.err" "$out/$tag.out" | cut -c1-200)"; return; }
  if [ "$start" -gt 0 ]; then
    grep -qF "loom: resumed from $ckpt/$(step_name "$start") at step $start " "$out/$tag.out" ||
      fail "$tag: no 'resumed from $(step_name "$start")' line"
  elif grep -q 'resumed from' "$out/$tag.out"; then
    fail "$tag: resumed although no checkpoint existed"
  fi
  [ "$after" -eq "$end" ] || fail "$tag: latest is step $after, want $end"
  [ -f "$out/$tag.jsonl" ] && [ "$(wc -l <"$out/$tag.jsonl")" -eq $((end - start)) ] || fail "$tag: metrics hold $(cat "$out/$tag.jsonl" 2>/dev/null | wc -l) steps, want $((end - start))"
}

# NOTE [Soak checks]: what "the same run" and "nothing leaked" mean here, and why so.
# - Not the final weights within 1e-9 of the serial run's: in float64 a layout's reassociated sums
#   part the runs by 1e-16 a step, and training multiplies the difference over thousands of steps
#   (measured, 7,500 steps of dp2, tp2, pp2, sp2 ring and serial segments: loss 1e-16 at step 932,
#   7e-14 at 2,737, 6e-12 at 3,584, past 1e-9 at 4,938; final weights 1e-8 to 5e-3 apart, the most in
#   a collapsed MLP whose tiny gradients AdamW normalizes). It grows smoothly, with no step at a
#   resume. So exactness is checked where it holds, at every resume: a segment's first steps against
#   a serial run resumed from the same checkpoint (a lost moment, step count or weight shows there at
#   once); the end-to-end figures are printed, and only coverage, the LR schedule and the final mean
#   loss are bounds.
# - The float64 weights come from the checkpoints' own boxes: `loom ckpt export` writes float32.
# - Each segment writes its own metrics file: a resumed run carries over only the records of the
#   file it is given, and a killed run's records (up to its kill, past its last checkpoint) live only
#   in the temporary SIGKILL left, so per-segment files are what shows every step trained, twice
#   over where a kill made the next segment repeat steps.
# - Processes are the soak's by their command line (checkpoint.dir under DIR): other jobs share the
#   machine, and a machine-wide count of loom or mpirun processes would count theirs.
# - File descriptors: the soak's shell's (ls /proc/$$/fd) and every process's open files under DIR,
#   at the start and the end; open files elsewhere in /tmp belong to other jobs too.
fd_list() { ls /proc/$$/fd | sort -n | tr '\n' ' '; }
open_in_out() { find /proc/[0-9]*/fd -lname "$out/*" 2>/dev/null | wc -l; }

# final_checks: the serial run and every check of NOTE [Soak checks]; sets serial_s.
final_checks() {
  local last t0 rc=0
  last=$(latest_step)
  [ "$last" -gt 0 ] || { fail "no checkpoint was written"; return; }
  echo "serial run: 1 rank, steps 1..$last" >&2
  t0=$(now_ms)
  (cd "$out" && exec "$loom" train "${model[@]}" --set checkpoint.dir="$out/serial" --stop-after "$last" \
    --metrics "$out/serial.jsonl" >"$out/serial.out" 2>"$out/serial.err") || rc=$?
  serial_s=$((($(now_ms) - t0) / 1000))
  [ $rc -eq 0 ] || { fail "the serial run: exit code $rc: $(grep -m1 error "$out/serial.err" | cut -c1-200)"; return; }
  check "float64 weights and moments" python3 "$root/bench/soak_check.py" checkpoints "$ckpt/$(step_name "$last")" \
    "$out/serial/$(step_name "$last")"
  "$loom" ckpt export "$ckpt/$(step_name "$last")" --out "$out/soak.safetensors" >/dev/null &&
    "$loom" ckpt export "$out/serial/$(step_name "$last")" --out "$out/serial.safetensors" >/dev/null ||
    fail "loom ckpt export"
  check "exported weights" python3 "$root/bench/soak_check.py" exports "$out/soak.safetensors" "$out/serial.safetensors"
  rm -f "$out/soak.safetensors" "$out/serial.safetensors"
  check "losses" python3 "$root/bench/soak_check.py" losses "$out/serial.jsonl" \
    $(ls "$out"/seg-*.jsonl | sort)
}
# check NAME COMMAND...: runs a check, keeps its lines for the report.
check() {
  local name=$1 lines rc=0
  shift
  lines=$("$@" 2>&1) || rc=$?
  checks+=("$lines")
  [ $rc -eq 0 ] || fail "$name: ${lines##*$'\n'}"
}
# leak_checks: processes, descriptors, temporaries and checkpoints left, against the start.
leak_checks() {
  local left stale kept
  left=$(ours)
  [ -z "$left" ] && checks+=("ok: no process of the soak left") || fail "processes left: $left"
  [ -z "$(jobs -p)" ] && checks+=("ok: no child of the soak's shell left") || fail "children left: $(jobs -p | tr '\n' ' ')"
  [ "$(fd_list)" = "$fds_start" ] && checks+=("ok: the shell's file descriptors are those of the start: $fds_start") ||
    fail "the shell's file descriptors: $(fd_list), at the start: $fds_start"
  [ "$(open_in_out)" -eq 0 ] && checks+=("ok: no open file under $out") || fail "$(open_in_out) open files under $out"
  stale=$(find "$out" -name '*.loom-partial' -o -name '.step-*.partial' | tr '\n' ' ')
  [ -z "$stale" ] && checks+=("ok: no temporary left (*.loom-partial, .step-*.partial)") || fail "temporaries left: $stale"
  [ "$mpi_left_dirs$mpi_left_shm" = 00 ] && checks+=("ok: Open MPI left no file") ||
    checks+=("note: SIGKILLed launchers left $mpi_left_dirs Open MPI session directories and $mpi_left_shm shared-memory segments ($((mpi_left_bytes / 1048576)) MiB), as SIGKILL must; the soak removed them")
  kept=$(find "$ckpt" -mindepth 1 -maxdepth 1 -name 'step-*' | wc -l)
  [ "$kept" -le 2 ] && checks+=("ok: $kept checkpoints kept (checkpoint.keep = 2)") || fail "$kept checkpoints kept, keep is 2"
}

# report: the segments, their layouts, kills, resumes and steps, the times and every check.
report() {
  local tsv=$out/segments.tsv
  echo "soak report (seed $seed, --minutes $minutes, DIR $out)"
  echo "model: gpt-tiny shrunk (2 layers, d_model 64, seq_len 32, vocab 256, float64), train.steps $steps"
  awk -F'\t' '{n++; r[$3]++; if ($4 > 0) res++; if ($7 == "rank" || $7 == "launcher") k[$7]++;
    if ($7 == "missed") miss++; all += $11}
    END {printf "segments: %d (1 rank: %d, 2 ranks: %d, 4 ranks: %d), %d resumed; %d s\n", n, r[1], r[2], r[4], res, all;
         printf "kills: %d (SIGKILL to a rank: %d, to the launcher: %d; %d more planned kills came after the segment ended)\n",
           k["rank"] + k["launcher"], k["rank"], k["launcher"], miss}' "$tsv"
  echo "layouts: $(cut -f2 "$tsv" | sort | uniq -c | awk '{printf "%s%s x%d", sep, $2, $1; sep = ", "}')"
  echo "steps: $(latest_step) of the schedule's $steps ($(awk -F'\t' '$7 == "rank" || $7 == "launcher" {if ($8 != "-") n += $8 - $10} END {print n + 0}' "$tsv") trained again after kills); serial run ${serial_s:-?} s"
  echo "wall: $((SECONDS / 60)) min $((SECONDS % 60)) s in all"
  [ ! -f "$out/boundaries.txt" ] || awk '{n++; if ($2 == "ok:") ok++; for (i = 1; i < NF; i++) {
      if ($i == "loss") l = $(i + 1) + 0 > l ? $(i + 1) + 0 : l; if ($i == "grad_norm") g = $(i + 1) + 0 > g ? $(i + 1) + 0 : g}}
    END {printf "%s: %d of %d segments continue exactly where they resumed (their first steps against a serial run from the same checkpoint, killed segments up to their kill): max relative difference loss %.3g, grad_norm %.3g (1e-9)\n",
      ok == n ? "ok" : "FAIL", ok, n, l, g}' "$out/boundaries.txt"
  printf '%s\n' "${checks[@]}"
  [ ${#failures[@]} -eq 0 ] && echo "PASSED: every check" || { echo "FAILED: ${#failures[@]} checks"; printf '  %s\n' "${failures[@]}"; }
}

fds_start=$(fd_list)
[ "$(open_in_out)" -eq 0 ] || { echo "soak: error: files under $out are open before the soak" >&2; exit 2; }
[ -z "$(ours)" ] || { echo "soak: error: processes of a soak in $out are running" >&2; exit 2; }
# Open MPI's files of the soak's jobs (the session directory, the shared-memory segments of its vader
# transport) go to directories of the soak's own, so that what a job leaves is known to be its own.
shm=$(mktemp -d /dev/shm/loom-soak.XXXXXX)
trap 'left=$(ours); [ -z "$left" ] || kill -9 $left 2>/dev/null; rm -rf "$shm"' EXIT
export OMPI_MCA_orte_tmpdir_base=$out/ompi OMPI_MCA_btl_vader_backing_directory=$shm
mkdir "$out/ompi"
checks=() mpi_left_dirs=0 mpi_left_shm=0 mpi_left_bytes=0
echo "soak: $minutes min, seed $seed, DIR $out, train.steps $steps" >&2
deadline=$((SECONDS + minutes * 60)) i=0 killed_after=-
# A soak never ends on a killed segment: the final checks compare the segment that ran to its end.
while [ ${#failures[@]} -eq 0 ] && [ "$(latest_step)" -lt $steps ] && { [ $SECONDS -lt $deadline ] || [ "$killed_after" != - ]; }; do
  i=$((i + 1))
  run_segment $i "${layouts[(i - 1) % ${#layouts[@]}]}" >&2
done
[ ${#failures[@]} -gt 0 ] || final_checks
leak_checks
report | tee "$out/report.txt"
[ ${#failures[@]} -eq 0 ] || exit 1
[ $keep_out -eq 1 ] || rm -rf "$out"

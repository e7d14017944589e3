#!/usr/bin/env bash
# Runs every fuzz target of BUILD (`make fuzz`, `make fuzz-ci`) for SECONDS each, FUZZ_JOBS of them
# at a time (default 1; the Makefile passes JOBS: each target is one process on one core), on a fresh
# copy of its seed corpus (tests/fuzz/corpus/TARGET; the seeds themselves are never rewritten).
# Prints each target's executions and any finding, in the targets' order; exits 1 when a target
# found one, naming the saved input and the command that replays it.
#   usage: [FUZZ_JOBS=N] tests/fuzz/run.sh BUILD SECONDS [TARGET...]
# Limits of every run (NOTE [Reader contract]): an input may take 10 s (-timeout), allocate 512 MiB
# at once (-malloc_limit_mb) and grow the process to 2 GiB (-rss_limit_mb; libtorch alone is some
# 300 MiB of it under AddressSanitizer).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD SECONDS [TARGET...]}
seconds=${2:?usage: run.sh BUILD SECONDS [TARGET...]}
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for dir in "$here"/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
work="$build/fuzz-work"
# Leaks are findings too; a sanitizer report ends the run with the input saved.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
# abort_on_error: gcc's UBSan runtime is its own library, and only an abort lets libFuzzer save the input.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1}

jobs=${FUZZ_JOBS:-1}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "loom fuzz: error: FUZZ_JOBS = '$jobs' is not a whole number >= 1" >&2; exit 2; }
for t in "${targets[@]}"; do
  [ -x "$build/bin/$t" ] || { echo "loom fuzz: $build/bin/$t is not built (make fuzz builds it)" >&2; exit 2; }
done

# fuzz TARGET: one target's run; its report lines in $work/TARGET/report.txt, and
# $work/TARGET/failed when it found something.
fuzz() {
  local t=$1 bin="$build/bin/$1"
  rm -rf "${work:?}/$t" && mkdir -p "$work/$t/corpus" "$work/$t/findings"
  cp "$here/corpus/$t/"* "$work/$t/corpus/"
  local log="$work/$t/log.txt" rc=0
  "$bin" -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/$t/findings/" "$work/$t/corpus" >"$log" 2>&1 || rc=$?
  local execs rate files found
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  files=$(find "$work/$t/corpus" -type f | wc -l)
  found=$(find "$work/$t/findings" -type f | head -1)
  {
    if [ $rc -eq 0 ] && [ -z "$found" ]; then
      printf '%-20s %12s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$files" ok
    else
      printf '%-20s %12s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$files" "FINDING (exit $rc)"
      grep -m1 -E 'ERROR: |runtime error|contract broken|Sanitizer' "$log" | sed 's/^/    /' || true
      echo "    input: ${found:-none saved}; log: $log"
      [ -n "$found" ] && echo "    replay: $bin $found"
      touch "$work/$t/failed"
    fi
  } >"$work/$t/report.txt"
}

running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  fuzz "$t" & running=$((running + 1))
done
wait || true

failed=()
printf '%-20s %12s %8s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  cat "$work/$t/report.txt"
  [ -e "$work/$t/failed" ] && failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "loom fuzz: findings in ${failed[*]}" >&2
  exit 1
fi

#!/usr/bin/env bash
# expect_error.sh LOOM PATTERN [ARGS...]: runs `LOOM ARGS...` and requires the bad-input contract:
# exit code 2, nothing on stdout, and exactly one line on stderr that starts with "loom: error:"
# and contains PATTERN. Files named by --metrics or --trace must not have been created.
# With EXPECT_GRID=1 (a refused pipeline schedule) the error line may be followed by the schedule's
# grid, which must mark the failing step with ">>".
set -u
loom=$1 pattern=$2
shift 2
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$loom" "$@" >"$out" 2>"$err"
rc=$?
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
[ "$rc" -eq 2 ] || fail "exit code $rc, want 2"
[ ! -s "$out" ] || fail "stdout is not empty"
if [ "${EXPECT_GRID:-0}" = 1 ]; then
  grep -q '^  >> ' "$err" || fail "stderr does not mark the failing step with '>>'"
  [ "$(grep -c '^loom: error: ' "$err")" -eq 1 ] || fail "stderr has more than one error line"
else
  [ "$(wc -l <"$err")" -eq 1 ] || fail "stderr has $(wc -l <"$err") lines, want 1"
fi
head -1 "$err" | grep -q '^loom: error: ' || fail "stderr does not start with 'loom: error: '"
head -1 "$err" | grep -qF -- "$pattern" || fail "the error line lacks '$pattern'"
prev=""
for a in "$@"; do
  if [ "$prev" = "--metrics" ] || [ "$prev" = "--trace" ]; then [ ! -e "$a" ] || fail "$a was written"; fi
  prev=$a
done
echo "ok: $(head -1 "$err")"

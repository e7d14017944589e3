#!/usr/bin/env bash
# expect_error.sh LOOM PATTERN [ARGS...]: runs `LOOM ARGS...` and requires the bad-input contract:
# exit code 2, nothing on stdout, and exactly one line on stderr that starts with "loom: error:"
# and contains PATTERN. Files named by --metrics or --trace must not have been created.
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
[ "$(wc -l <"$err")" -eq 1 ] || fail "stderr has $(wc -l <"$err") lines, want 1"
grep -q '^loom: error: ' "$err" || fail "stderr does not start with 'loom: error: '"
grep -qF -- "$pattern" "$err" || fail "stderr lacks '$pattern'"
prev=""
for a in "$@"; do
  if [ "$prev" = "--metrics" ] || [ "$prev" = "--trace" ]; then [ ! -e "$a" ] || fail "$a was written"; fi
  prev=$a
done
echo "ok: $(cat "$err")"

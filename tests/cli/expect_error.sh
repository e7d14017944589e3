#!/usr/bin/env bash
# expect_error.sh LOOM PATTERN [ARGS...]: runs `LOOM ARGS...` and requires the bad-input contract:
# exit code 2, nothing on stdout, exactly one line on stderr that starts with "loom: error:" and
# contains PATTERN, and nothing written: every output the arguments name (cli/output_state.sh:
# --out, --csv, --svg, --trace, --metrics, --cluster-out, --set checkpoint.dir=, the files loom
# writes beside them and their temporaries) is as it was before, absent or unchanged.
# With EXPECT_UNCHANGED=DIR (several: DIR:DIR...), a real folder of the test's own where the refused
# outputs would land, every entry in DIR, recursively, files with their checksums, is as it was
# before too (cli/output_state.sh: unchanged_state); DIR must be a directory.
# With EXPECT_GRID=1 (a refused pipeline schedule) the error line may be followed by the schedule's
# grid, which must mark the failing step with ">>".
set -u
loom=$1 pattern=$2
shift 2
source "$(dirname -- "${BASH_SOURCE[0]}")/output_state.sh"
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
before_dirs=$(unchanged_state) || { echo "FAIL: $before_dirs"; exit 1; }
before=$(output_state "$@")
"$loom" "$@" >"$out" 2>"$err"
rc=$?
after=$(output_state "$@")
after_dirs=$(unchanged_state) || after_dirs="$after_dirs (after the run)"
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
[ "$before" = "$after" ] || fail "an output changed (- before, + after):
$(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | sed 's/^</-/; s/^>/+/')"
[ "$before_dirs" = "$after_dirs" ] || fail "the folder EXPECT_UNCHANGED = '$EXPECT_UNCHANGED' changed (- before, + after):
$(diff <(echo "$before_dirs") <(echo "$after_dirs") | grep '^[<>]' | sed 's/^</-/; s/^>/+/')"
echo "ok: $(head -1 "$err")"

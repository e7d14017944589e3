#!/usr/bin/env bash
# bad_input.sh PATTERN LOOM MPIEXEC... -- ARGS...: 2 ranks get bad input; the job must exit 2 with
# exactly one `loom: error:` line (printed once, on behalf of every rank) containing PATTERN,
# nothing on stdout, and nothing written: every output ARGS name is as it was before
# (cli/output_state.sh), and so is every entry of the folders EXPECT_UNCHANGED names, as in
# cli/expect_error.sh.
set -u
pattern=$1 loom=$2
shift 2
launcher=()
while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
shift
source "$(dirname -- "${BASH_SOURCE[0]}")/../cli/output_state.sh"
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
before_dirs=$(unchanged_state) || { echo "FAIL: $before_dirs"; exit 1; }
before=$(output_state "$@")
timeout -k 5 60 "${launcher[@]}" -n 2 "$loom" "$@" 2>"$err" >"$out"
rc=$?
after=$(output_state "$@")
after_dirs=$(unchanged_state) || after_dirs="$after_dirs (after the run)"
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
[ "$rc" -eq 2 ] || fail "exit code $rc, want 2"
[ ! -s "$out" ] || fail "stdout is not empty"
[ "$(grep -c '^loom: error: ' "$err")" -eq 1 ] || fail "want exactly one 'loom: error:' line"
grep -qF -- "$pattern" "$err" || fail "no '$pattern'"
[ "$before" = "$after" ] || fail "an output changed (- before, + after):
$(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | sed 's/^</-/; s/^>/+/')"
[ "$before_dirs" = "$after_dirs" ] || fail "the folder EXPECT_UNCHANGED = '$EXPECT_UNCHANGED' changed (- before, + after):
$(diff <(echo "$before_dirs") <(echo "$after_dirs") | grep '^[<>]' | sed 's/^</-/; s/^>/+/')"
echo "ok: $(grep '^loom: error: ' "$err")"

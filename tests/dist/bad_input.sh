#!/usr/bin/env bash
# bad_input.sh PATTERN LOOM MPIEXEC... -- ARGS...: 2 ranks get bad input; the job must exit 2
# with exactly one `loom: error:` line (printed once, on behalf of every rank) containing PATTERN.
set -u
pattern=$1 loom=$2
shift 2
launcher=()
while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
shift
err=$(mktemp)
trap 'rm -f "$err"' EXIT
timeout -k 5 60 "${launcher[@]}" -n 2 "$loom" "$@" 2>"$err" >/dev/null
rc=$?
fail() { echo "FAIL: $*"; cat "$err"; exit 1; }
[ "$rc" -eq 2 ] || fail "exit code $rc, want 2"
[ "$(grep -c '^loom: error: ' "$err")" -eq 1 ] || fail "want exactly one 'loom: error:' line"
grep -qF -- "$pattern" "$err" || fail "no '$pattern'"
echo "ok: $(grep '^loom: error: ' "$err")"

#!/usr/bin/env bash
# Runs the tests of a sanitizer build (`make test-asan`, `make test-tsan`; README.md here).
#   usage: tests/sanitizers/run.sh address|thread BUILD [ctest args...]
# address: the unit tests (label `unit-shards`: each binary in two processes) and the tests
# labelled `threads`, under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer.
# thread: the tests labelled `threads` under ThreadSanitizer. Every report fails the run, also one from a process whose exit code a test
# expects to be non-zero (a rank that is aborted on purpose): the runtimes write their reports into
# BUILD/sanitizer-reports/ (not stderr, which some tests read), and any file there at the end is a
# finding, printed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kind=${1:?usage: run.sh address|thread BUILD [ctest args...]}
build=$(cd "${2:?usage: run.sh address|thread BUILD [ctest args...]}" && pwd)
shift 2
reports=$build/sanitizer-reports
rm -rf "$reports" && mkdir -p "$reports"

# Open MPI unloads its components at MPI_Finalize (Debian's build has no way to keep them), so a
# leak inside one of them is reported with frames of an unknown module. Its whole allocation stack
# (fast_unwind_on_malloc=0: through libraries built without frame pointers) reaches the Open MPI
# library that loaded it, which lsan.supp names. Slow, so only for the tests that start MPI.
# Those also run without the runtime's tracking of dynamic thread-local storage
# (intercept_tls_get_addr=0): at exit LeakSanitizer's tracer read a range of it that was no longer
# mapped ("DTLS ... at 0x0000000c176e-0x0004000c2870", then "Tracer caught signal 11") in every
# 3-rank run of the collectives once the link order changed, the tests themselves passing. Without
# that tracking the dynamic TLS blocks of dlopen'd libraries (Open MPI's components, which it
# unloads at MPI_Finalize) are not scanned as roots: a block reachable only from one would be
# reported as a leak, loudly, never hidden.
asan="detect_leaks=1:halt_on_error=1:log_path=$reports/asan:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
export TSAN_OPTIONS="suppressions=$here/tsan.supp:halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan"

rc=0
run() {  # run LABEL: the tests of LABEL
  (cd "$build" && ctest --output-on-failure --no-tests=error -L "^$1\$" "${args[@]}") || rc=$?
}
args=("$@")
case $kind in
  address)
    ASAN_OPTIONS=$asan run unit-shards
    ASAN_OPTIONS=$asan:fast_unwind_on_malloc=0:intercept_tls_get_addr=0 run threads ;;
  thread) run threads ;;
  *) echo "loom sanitizers: unknown kind '$kind' (address or thread)" >&2; exit 2 ;;
esac

found=$(find "$reports" -type f | sort)
if [ -n "$found" ]; then
  echo "loom sanitizers: $(echo "$found" | wc -l) report(s) in $reports:" >&2
  for f in $found; do echo "== $f" >&2; head -60 "$f" >&2; done
  exit 1
fi
[ $rc -eq 0 ] || { echo "loom sanitizers: tests failed under the $kind sanitizer" >&2; exit $rc; }
echo "loom sanitizers: $kind: no reports"

#!/usr/bin/env bash
# NOTE [MPI under ThreadSanitizer]: the race planted in tests/dist/test_collectives.cpp (a thread
# writes a send's buffer while the send is pending) must be reported by ThreadSanitizer, with
# loom's mark of the send's buffer as the other access. It fails when nothing is reported: MPI's
# accesses are then hidden in a way that hides loom's races with them too.
#   planted_race.sh DIST_TESTS MPIEXEC...
set -euo pipefail
binary=${1:?usage: planted_race.sh DIST_TESTS MPIEXEC...}
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Its own report directory and options: tests/sanitizers/run.sh counts any report in the build's
# directory as a finding, and this one is expected.
TSAN_OPTIONS="halt_on_error=0:exitcode=0:log_path=$dir/tsan" \
  "$@" -n 2 -x LOOM_TEST_WORLD_SIZE=2 "$binary" --gtest_also_run_disabled_tests \
  --gtest_filter=Collectives.DISABLED_PlantedRaceBufferWrittenDuringSend >"$dir/out" 2>&1 || {
  cat "$dir/out"
  echo "planted_race: the run failed"
  exit 1
}
reports=$(cat "$dir"/tsan.* 2>/dev/null || true)
fail() {
  echo "$reports" | head -80
  echo "planted_race: $1"
  exit 1
}
grep -q "WARNING: ThreadSanitizer: data race" <<<"$reports" || fail "no data race reported"
grep -q "PlantedRaceBufferWrittenDuringSend" <<<"$reports" || fail "the report does not name the planted write"
grep -q "mark_mpi_read" <<<"$reports" || fail "the report does not name loom's mark of the send's buffer"
echo "planted_race: reported, with the planted write and the send's mark"

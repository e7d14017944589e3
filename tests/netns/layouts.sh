#!/usr/bin/env bash
# NOTE [Test cluster]: the layout-equivalence suites across hosts. A cluster of 2 hosts x 2 ranks,
# then 4 hosts x 1 rank (scripts/netns-cluster.sh), each running loom_dist_tests at 4 ranks: the
# collectives' closed forms (over TCP between hosts, the levels and a pair's exchange among them),
# dp and ZeRO, tp (within a host at 2 x 2), pp (across hosts), sp, the sparse exchange and the
# validation pass, each against the serial run in float64 at 1e-9 as on one machine. And NOTE
# [Hosts in the mesh]: `loom train` at dp 2 x tp 2 warns that its tp groups span hosts on 4 x 1,
# and does not on 2 x 2.
# Exits 77 (ctest: skipped) with the reason where namespaces cannot be made.
#   usage: layouts.sh LOOM_DIST_TESTS LOOM
set -euo pipefail
tests_bin=$1
loom=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster="$root/scripts/netns-cluster.sh"
export LOOM_CLUSTER=${LOOM_CLUSTER:-loomt}
export LOOM_CLUSTER_DIR=${LOOM_CLUSTER_DIR:-/tmp/loom-cluster-$LOOM_CLUSTER}
work=$(mktemp -d)
trap '"$cluster" down || true; rm -rf "$work"' EXIT
filters="Collectives.*:*DataParallel*:*FullySharded*:*TensorParallel*:*PipelineGpt*:*SequenceParallelGpt*:*SparseParallel*:*Validation*"
for shape in "2 2" "4 1"; do
  read -r hosts slots <<< "$shape"
  rc=0
  "$cluster" up "$hosts" --slots "$slots" || rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  echo "== $hosts hosts x $slots ranks"
  # The ranks are where the hostfile puts them: $slots per host, each host its own name.
  placed=$("$cluster" mpirun -np 4 hostname | sort | uniq -c | awk '{print $1}' | tr '\n' ' ')
  expected=$(for _ in $(seq 1 "$hosts"); do printf '%s ' "$slots"; done)
  [ "$placed" = "$expected" ] || { echo "loom: error: ranks per host '$placed', expected '$expected'" >&2; exit 1; }
  "$cluster" mpirun -np 4 -x LOOM_TEST_WORLD_SIZE=4 -x OMP_NUM_THREADS=1 "$tests_bin" --gtest_filter="$filters" \
    --gtest_brief=1 | tee "$work/tests"
  grep -Eq "PASSED.*[^0-9][1-9][0-9]* tests?" "$work/tests" || { echo "no test ran on $hosts x $slots"; exit 1; }
  (cd "$work" && "$cluster" mpirun -np 4 "$loom" train -c "$root/configs/gpt-tiny.toml" --quiet \
    --set parallel.dp=2 --set parallel.tp=2 --set train.steps=1 --set train.threads=1 2> "$work/stderr") ||
    { echo "loom train failed on $hosts x $slots:"; cat "$work/stderr"; exit 1; }
  if [ "$slots" -eq 1 ]; then
    grep -q "loom: warning: the tp (2) groups span hosts (ranks on rank 0's host: 1)" "$work/stderr" ||
      { echo "no tp span warning on $hosts x $slots:"; cat "$work/stderr"; exit 1; }
  elif grep -q "span hosts" "$work/stderr"; then
    echo "a span warning on $hosts x $slots:"; cat "$work/stderr"; exit 1
  fi
done

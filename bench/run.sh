#!/usr/bin/env bash
# bench/run.sh [WORKLOAD...]: runs each workload of BENCHMARKS.md that this build supports and
# prints one JSON line per run, with the peer (PyTorch eager, same model and threads) measured in
# the same run and the ratio. Default: gpt-tiny. Environment: BENCH_STEPS, BENCH_ROUNDS, THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bin/loom ] || { echo "loom: error: build/bin/loom is missing; run 'make' first" >&2; exit 2; }
exec /usr/bin/python3 bench/run.py "$@"

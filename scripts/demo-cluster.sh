#!/usr/bin/env bash
# `make demo-cluster`: the demo's whole text workflow (scripts/demo.sh) with its training on two
# hosts of two ranks each, made on this machine as network namespaces (NOTE [Test cluster];
# docs/multi-host.md): dp = 2 across the hosts, tp = 2 within each, the checkpoint in a directory
# both hosts see. Needs root. Outputs in out/demo-cluster/.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_CLUSTER=${LOOM_CLUSTER:-loomdemo} LOOM_CLUSTER_SUBNET=${LOOM_CLUSTER_SUBNET:-10.78.0}
trap 'scripts/netns-cluster.sh down' EXIT
rc=0
scripts/netns-cluster.sh up 2 --slots 2 || rc=$?
[ "$rc" -eq 77 ] && { echo "loom: error: the cluster demo needs network namespaces (root), iproute2 and Open MPI" >&2; exit 2; }
[ "$rc" -eq 0 ] || exit "$rc"
LOOM_DEMO_OUT=out/demo-cluster \
LOOM_DEMO_LAUNCH="scripts/netns-cluster.sh mpirun -np 4" \
LOOM_DEMO_LAYOUT="--set parallel.dp=2 --set parallel.tp=2 --set train.threads=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 ))" \
LOOM_DEMO_WHERE="on 2 hosts x 2 ranks (dp = 2 across, tp = 2 within)" \
  scripts/demo.sh "$@"

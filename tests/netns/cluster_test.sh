# Sourced by the tests of tests/netns (bash, set -euo pipefail); `tiny_model` (below) gives the
# model they train. `cluster_test NAME SUBNET LOOM`
# sets loom (the binary's path), root (the source tree), cluster (scripts/netns-cluster.sh), names
# the test's own cluster (LOOM_CLUSTER, its subnet and state folder, unless the caller set them),
# makes the working folder `work` and takes both away on exit.
cluster_test() {
  loom=$(realpath "$3")
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cluster="$root/scripts/netns-cluster.sh"
  export LOOM_CLUSTER=${LOOM_CLUSTER:-$1}
  export LOOM_CLUSTER_SUBNET=${LOOM_CLUSTER_SUBNET:-$2}
  export LOOM_CLUSTER_DIR=${LOOM_CLUSTER_DIR:-/tmp/loom-cluster-$LOOM_CLUSTER}
  work=$(mktemp -d)
  trap '"$cluster" down || true; rm -rf "$work"' EXIT
}

# Sets the array `tiny`: the float64 gpt-tiny these tests train (2 layers of d 64, 32 tokens, a
# vocabulary of 256, one thread, warm-up 2, dense tables), then the arguments given.
tiny_model() {
  local configs
  configs=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../configs" && pwd)
  tiny=(-c "$configs/gpt-tiny.toml" --set model.n_layers=2 --set model.d_model=64 --set model.seq_len=32
        --set model.vocab=256 --set model.dtype=float64 --set train.threads=1 --set train.warmup=2
        --set parallel.sparse=off "$@")
}

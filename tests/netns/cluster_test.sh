# Sourced by the tests of tests/netns (bash, set -euo pipefail): `cluster_test NAME SUBNET LOOM`
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

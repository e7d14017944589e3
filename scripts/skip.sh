# skip.sh, sourced: skip CAPABILITY REASON... ends a test (or the test cluster's set-up) as
# skipped, exit 77 with the reason, because the machine lacks CAPABILITY: "netns" (root and
# network namespaces, iproute2, util-linux, Open MPI), "tap" (/dev/net/tun), "nftables", "torch"
# (the project's python3 with PyTorch). Where LOOM_REQUIRE names the capability (CI, which probed
# its machine: .ci/run), a skip would hide a failure: it fails instead, exit 1, saying so.
skip() {
  local capability=$1
  shift
  case " ${LOOM_REQUIRE:-} " in
    *" $capability "*)
      echo "FAIL: skipped, but this machine has $capability (LOOM_REQUIRE = '${LOOM_REQUIRE}'): $*" >&2
      exit 1;;
  esac
  echo "skipped: $*" >&2
  exit 77
}

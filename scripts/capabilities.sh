#!/usr/bin/env bash
# capabilities.sh: the words of scripts/skip.sh's capabilities this machine has, on one line:
# "torch" (the project's python3 imports PyTorch: .venv/, or LOOM_TORCH when it names a python3),
# "netns" (root, iproute2, util-linux's unshare, Open MPI, and a network namespace can be made),
# "tap" (/dev/net/tun, with namespaces), "nftables" (nft, with namespaces). CI exports them as
# LOOM_REQUIRE (.ci/run), so a test that skips for want of one it has fails instead.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
have=()
python=$root/.venv/bin/python3
[ -n "${LOOM_TORCH:-}" ] && python=$LOOM_TORCH
[ -x "$python" ] && [ ! -d "$python" ] && "$python" -c 'import torch' >/dev/null 2>&1 && have+=(torch)
netns=0
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && command -v unshare >/dev/null && command -v mpirun >/dev/null; then
  probe="loomcap$$"
  ip netns add "$probe" >/dev/null 2>&1 && { ip netns del "$probe"; netns=1; have+=(netns); }
fi
[ "$netns" -eq 1 ] && [ -c /dev/net/tun ] && have+=(tap)
[ "$netns" -eq 1 ] && command -v nft >/dev/null && have+=(nftables)
echo "${have[*]}"

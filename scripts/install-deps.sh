#!/usr/bin/env bash
# Installs everything loom needs to build, test, benchmark and run its demo: Debian packages, and
# the pinned PyTorch 2 release of scripts/torch-requirements.txt into the project's .venv/ (its
# libtorch is the one loom links; the same interpreter runs the PyTorch peer of the benchmarks).
# LOOM_TORCH=/path/to/python3 (a PyTorch 2 the user already has) or LOOM_TORCH=/path/to/libtorch
# (a LibTorch folder) skips the .venv; cmake reads the same variable (cmake/torch.cmake).
# Idempotent and quiet: a second run with everything present does nothing and prints nothing.
# libsentencepiece-dev: `loom data prepare --tokenizer bpe|unigram`; libicu-dev: byte-level BPE's
# character classes. librsvg2-bin: the picture tests
# render loom's SVGs to PNG. slurm-wlm, munge: the Slurm test runs a one-node Slurm here.
# iproute2, util-linux, nftables: the test cluster of network namespaces and its lossy links.
# libfuzzer-14-dev: `make fuzz` links libFuzzer's runtime into gcc-built targets (tests/fuzz/README.md).
set -euo pipefail

# The environment's choices first, each refused in one line (exit 2) before anything is installed.
case "${LOOM_CUDA:-auto}" in
  auto|on|off) ;;
  *) echo "loom: error: LOOM_CUDA = '$LOOM_CUDA' is not one of: auto, on, off; hint: unset it for auto (CUDA where libtorch has it and nvcc is found)" >&2; exit 2;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${LOOM_TORCH:-}" ]; then
  if [ -d "$LOOM_TORCH" ]; then
    [ -f "$LOOM_TORCH/share/cmake/Torch/TorchConfig.cmake" ] || {
      echo "loom: error: LOOM_TORCH = $LOOM_TORCH is a folder without share/cmake/Torch/TorchConfig.cmake; hint: name an unpacked LibTorch folder, or a python3 with PyTorch 2" >&2; exit 2; }
  elif ! "$LOOM_TORCH" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1; then
    echo "loom: error: LOOM_TORCH = $LOOM_TORCH is not a python3 that imports PyTorch 2; hint: unset LOOM_TORCH to use the pinned release in .venv/" >&2
    exit 2
  fi
fi

packages=(
  build-essential cmake make ninja-build pkg-config ccache
  libopenmpi-dev openmpi-bin
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv
  libsentencepiece-dev libicu-dev
  librsvg2-bin
  slurm-wlm munge
  iproute2 util-linux nftables
  libfuzzer-14-dev
)

missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "loom: installing ${#missing[@]} missing package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyTorch: the user's own (LOOM_TORCH, checked above), else the pinned release in .venv/.
[ -n "${LOOM_TORCH:-}" ] && exit 0
pin=$(sed -n 's/^torch==//p' "$root/scripts/torch-requirements.txt")
venv=$root/.venv
have=$("$venv/bin/python3" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
[ "$have" = "$pin" ] && exit 0
echo "loom: installing PyTorch $pin into $venv (about 3 GB from PyPI, once)"
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
"$venv/bin/python3" -m pip install -q --disable-pip-version-check -r "$root/scripts/torch-requirements.txt"

#!/usr/bin/env bash
# Installs everything loom needs to build, test, benchmark and run its demo, from Debian packages.
# Idempotent and quiet: a second run with everything present does nothing and prints nothing.
# libopenblas0-openmp: without it libtorch falls back to the reference BLAS, some 30x slower on GEMMs;
# the OpenMP flavour shares libtorch's thread pool instead of oversubscribing the cores.
# libsentencepiece-dev: `loom data prepare --tokenizer bpe|unigram`. librsvg2-bin: the picture tests
# render loom's SVGs to PNG. slurm-wlm, munge: the Slurm test runs a one-node Slurm here.
# libfuzzer-14-dev: `make fuzz` links libFuzzer's runtime into gcc-built targets (tests/fuzz/README.md).
set -euo pipefail

packages=(
  build-essential cmake make pkg-config ccache
  libtorch-dev
  libopenmpi-dev openmpi-bin
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas0-openmp
  python3 python3-torch
  libsentencepiece-dev
  librsvg2-bin
  slurm-wlm munge
  libfuzzer-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "loom: installing ${#missing[@]} missing package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

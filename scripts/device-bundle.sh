#!/usr/bin/env bash
# Prepares, on this machine, what a lent GPU machine lacks to build loom (scripts/device-check.sh):
# .device/prefix, a copy of the Debian packages below (headers, libraries, CMake package files) in
# their /usr layout, so that their CMake files find the rest relative to themselves. That machine
# has CMake, ninja, nvcc, PyTorch 2 with CUDA and NCCL's wheel, and no MPI (loom builds there with
# LOOM_MPI=OFF) and no package registry. .device/ (about 9 MiB) is ignored by git (.gitignore) and
# copied to that machine with the working tree.
#   scripts/device-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev libcli11-dev libxxhash-dev libxxhash0
          libsentencepiece-dev libsentencepiece0 libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian)
scripts/install-deps.sh  # they are installed here first
out=.device/prefix
rm -rf .device
mkdir -p "$out"
for package in "${packages[@]}"; do
  dpkg -L "$package" | while read -r file; do
    case $file in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/*) continue ;; esac
    [ -f "$file" ] || [ -L "$file" ] || continue
    target=$out${file#/usr}
    mkdir -p "$(dirname "$target")"
    cp -P "$file" "$target"
  done
done
size=$(du -sm .device | cut -f1)
[ "$size" -lt 48 ] || { echo "device-bundle: .device is $size MiB; the working tree that travels may hold 64"; exit 1; }
echo "device-bundle: .device/prefix holds ${#packages[@]} packages, $size MiB"

#!/usr/bin/env bash
# Prepares, on this machine, what a lent GPU machine lacks to build loom (scripts/device-check.sh):
# .device/prefix, a copy of the Debian packages below (headers, libraries, CMake package files) in
# their /usr layout, so that their CMake files find the rest relative to themselves. That machine
# has CMake, ninja, nvcc, PyTorch 2 with CUDA and NCCL's wheel, and no MPI and no package registry.
# Open MPI travels too (its runtime, headers and launcher with PMIx, hwloc, libevent and the
# transports' libraries; about 25 MiB): relocated by OPAL_PREFIX (device-check.sh sets it), it
# starts several ranks sharing the GPU there. Its binaries need glibc 2.34 or later. Relocation was
# checked here by running ranks with the system's Open MPI hidden in a mount namespace. .device/
# (about 35 MiB) is ignored by git (.gitignore) and copied to that machine with the working tree.
#   scripts/device-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev libcli11-dev libxxhash-dev libxxhash0
          libsentencepiece-dev libsentencepiece0 libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
          openmpi-bin libopenmpi3 libopenmpi-dev openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1
          libmunge2 libnl-3-200 libnl-route-3-200)
scripts/install-deps.sh  # they are installed here first
out=.device/prefix
rm -rf .device
mkdir -p "$out"
for package in "${packages[@]}"; do
  dpkg -L "$package" | while read -r file; do
    case $file in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | */fortran/*) continue ;; esac
    [ -f "$file" ] || [ -L "$file" ] || continue
    target=$out${file#/usr}
    mkdir -p "$(dirname "$target")"
    cp -P "$file" "$target"
  done
done
# Debian's alternatives name the launcher and the library: here they are plain links.
ln -sf orterun "$out/bin/mpirun"
ln -sf orterun "$out/bin/mpiexec"
size=$(du -sm .device | cut -f1)
[ "$size" -lt 48 ] || { echo "device-bundle: .device is $size MiB; the working tree that travels may hold 64"; exit 1; }
echo "device-bundle: .device/prefix holds ${#packages[@]} packages, $size MiB"

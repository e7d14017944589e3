#!/usr/bin/env bash
# The check a GPU machine runs (issue 36), from the repository root, with the folder .device beside
# it (scripts/device-bundle.sh prepares it on a development machine; it is all the build needs that
# such a machine may lack):
#   scripts/device-check.sh
# It builds loom against that machine's PyTorch (its python3; LOOM_TORCH overrides) with loom's CUDA
# sources and the Open MPI .device carries (without MPI where that cannot start ranks), then runs,
# within about 8 minutes:
#   gpu_tests     the suite Gpu, each test run, not skipped: loom's kernel; the serial run on the GPU
#                 against the CPU run in float64 at 1e-9 (gpt, llama, dlrm, every layer swapped;
#                 MPI staging and NCCL); fused attention against the exact core; memory.budget;
#                 NCCL at world size 1 (every collective against its closed form); the swap tier's
#                 round trip on pinned blocks; the step clock's CUDA events
#   unit_tests, plan_tests   every CPU test of those binaries
#   train, train_gpu, train_gpu_swap, trace_gpu   serial runs on the CPU and the GPU (swapping every
#                 layer; writing a trace timed by CUDA events)
#   profile_gpu, simulate_gpu   `loom profile --cluster-out` on the GPU, and `loom simulate` on the
#                 cluster file it wrote
#   gemm_gpu_*    the GEMM peaks; bench   bench/gpu.py (llama-1b, gpt-small against PyTorch eager and
#                 torch.compile; gpt-long's longest sequence), about 4 minutes
#   gpu_layouts_np2, _np4   2 and 4 ranks sharing the GPU through MPI's host buffers against the
#                 serial CPU run (dp, tp, pp, sp, combined; float64, 1e-9), with the Open MPI that
#                 travels in .device (mpi_probe: whether it starts ranks there; if not, loom is
#                 built without MPI and these are left out, which the report shows)
# Writes device-report.json and device-report.txt (a table; the benchmark's table after it) into
# $OUT when set, else into ./device-report, each step's log beside them. `--configure-only` stops
# after configuring (a dry run on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/device-report}
build=build-device
mkdir -p "$out"
steps=()

step() {  # step NAME COMMAND...: its output in NAME.log, its exit code and seconds in the report
  local name=$1 begin=$SECONDS rc=0
  shift
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  steps+=("$name $rc $((SECONDS - begin))")
  echo "device-check: $name: exit $rc, $((SECONDS - begin)) s"
  return "$rc"
}

report() {
  printf '%s\n' "${steps[@]}" | python3 -c '
import json, os, sys
rows = [line.split() for line in sys.stdin if line.strip()]
steps = [{"step": n, "exit": int(rc), "seconds": int(s)} for n, rc, s in rows]
out = sys.argv[1]
report = {"steps": steps, "passed": all(s["exit"] == 0 for s in steps)}
if os.path.exists(out + "/gpu-bench.json"):
    report["bench"] = json.load(open(out + "/gpu-bench.json"))
json.dump(report, open(out + "/device-report.json", "w"), indent=1)
with open(out + "/device-report.txt", "w") as f:
    f.write("%-14s %5s %8s\n" % ("step", "exit", "seconds"))
    for s in steps:
        f.write("%-14s %5d %8d\n" % (s["step"], s["exit"], s["seconds"]))
    if os.path.exists(out + "/bench.log"):
        f.write("\n" + open(out + "/bench.log").read())
print(open(out + "/device-report.txt").read(), end="")
' "$out"
}
trap report EXIT

# Passes when the tests ran on the device: a skip (no usable GPU) is a failure here.
ran() {
  local said
  said=$("$@" 2>&1) || { echo "$said"; return 1; }
  echo "$said"
  ! grep -q '\[  SKIPPED \]' <<<"$said"
}

# Open MPI from .device/prefix, relocated (scripts/device-bundle.sh); loom is built without MPI
# where it cannot start two ranks here, and the multi-rank layouts are then not run.
mpi_lib=$PWD/.device/prefix/lib/x86_64-linux-gnu
export OPAL_PREFIX=$PWD/.device/prefix PMIX_PREFIX=$mpi_lib/pmix2 PATH=$PWD/.device/prefix/bin:$PATH
export LD_LIBRARY_PATH=$mpi_lib:$mpi_lib/openmpi/lib:$mpi_lib/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1 -x LD_LIBRARY_PATH)
mpi=(-DLOOM_MPI=OFF)
targets=(loom_cli loom_unit_tests loom_plan_tests)
if step mpi_probe timeout 60 "${mpirun[@]}" -n 2 true; then
  mpi=(-DLOOM_MPI=ON -DMPI_C_HEADER_DIR="$mpi_lib/openmpi/include" -DMPI_C_LIB_NAMES=mpi
       -DMPI_mpi_LIBRARY="$mpi_lib/libmpi.so.40")
  targets+=(loom_dist_tests)
fi

step gpu nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${mpi[@]}" -DLOOM_CUDA=on \
  -DLOOM_TORCH="${LOOM_TORCH:-$(command -v python3)}" -DCMAKE_PREFIX_PATH="$PWD/.device/prefix" || exit 1
[ "${1:-}" = --configure-only ] && exit 0
step build cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || exit 1
step version "$build/bin/loom" --version
step gpu_tests ran timeout 180 "$build/bin/loom_unit_tests" --gtest_filter='Gpu.*'
if [ -x "$build/bin/loom_dist_tests" ]; then  # 2 and 4 ranks sharing the GPU against the serial CPU run
  for np in 2 4; do
    step "gpu_layouts_np$np" ran timeout 150 "${mpirun[@]}" -n "$np" -x LOOM_TEST_WORLD_SIZE="$np" "$build/bin/loom_dist_tests" \
      --gtest_filter='GpuLayouts.*'
  done
fi
step train "$build/bin/loom" train -c configs/gpt-tiny.toml --set train.steps=20 --peak-flops 1e12 --quiet \
  --metrics "$out/train.jsonl"
step gemm_gpu_bf16 "$build/bin/loom" bench gemm --device cuda --dtype bfloat16 --seconds 0.3
step gemm_gpu_fp32 "$build/bin/loom" bench gemm --device cuda --dtype float32 --seconds 0.3
step train_gpu "$build/bin/loom" train -c configs/gpt-tiny.toml --set train.steps=20 --set train.device=cuda \
  --peak-flops 1e12 --quiet --metrics "$out/train_gpu.jsonl"
step train_gpu_swap "$build/bin/loom" train -c configs/gpt-tiny.toml --set train.steps=20 --set train.device=cuda \
  --set memory.swap=all --peak-flops 1e12 --quiet --metrics "$out/train_gpu_swap.jsonl"
step trace_gpu "$build/bin/loom" train -c configs/gpt-tiny.toml --set train.steps=3 --set train.device=cuda \
  --peak-flops 1e12 --quiet --trace "$out/gpu-trace.json"
step profile_gpu "$build/bin/loom" profile -c configs/gpt-small.toml --set train.device=cuda --repeats 3 \
  --out "$out/gpu-profile.json" --cluster-out "$out/gpu-cluster.toml"
step simulate_gpu "$build/bin/loom" simulate -c configs/llama-1b.toml --cluster "$out/gpu-cluster.toml" --gpus 1
step unit_tests env LOOM_SOURCE_DIR="$PWD" "$build/bin/loom_unit_tests" --gtest_brief=1
step plan_tests env LOOM_SOURCE_DIR="$PWD" "$build/bin/loom_plan_tests" --gtest_brief=1
step bench python3 bench/gpu.py --loom "$build/bin/loom" --out "$out" --budget-s 240

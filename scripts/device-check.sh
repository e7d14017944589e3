#!/usr/bin/env bash
# The check a GPU machine runs (issue 36), from the repository root, with the folder .device beside
# it (scripts/device-bundle.sh prepares it on a development machine; it is all the build needs that
# such a machine may lack):
#   scripts/device-check.sh
# It builds loom against that machine's PyTorch (its python3; LOOM_TORCH overrides) with loom's CUDA
# sources and without MPI, then runs what can be checked on a GPU so far: the suite Gpu (loom's own
# kernel on the device, and a serial run on the GPU against the CPU run in float64 at 1e-9; each
# must run, not be skipped), the unit and planner tests, and a serial training run on the CPU and
# on the GPU. As the GPU path grows (NCCL, the swap tier's copy stream) its checks join here.
# Writes device-report.json and device-report.txt (a table) into $OUT when set, else into
# ./device-report, each step's log beside them. `--configure-only` stops after configuring (a dry
# run on a machine without a GPU).
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
import json, sys
rows = [line.split() for line in sys.stdin if line.strip()]
steps = [{"step": n, "exit": int(rc), "seconds": int(s)} for n, rc, s in rows]
out = sys.argv[1]
json.dump({"steps": steps, "passed": all(s["exit"] == 0 for s in steps)}, open(out + "/device-report.json", "w"), indent=1)
with open(out + "/device-report.txt", "w") as f:
    f.write("%-14s %5s %8s\n" % ("step", "exit", "seconds"))
    for s in steps:
        f.write("%-14s %5d %8d\n" % (s["step"], s["exit"], s["seconds"]))
print(open(out + "/device-report.txt").read(), end="")
' "$out"
}
trap report EXIT

# Passes when the suite Gpu ran on the device: a skip (no usable GPU) is a failure here.
gpu_tests() {
  local said
  said=$("$build/bin/loom_unit_tests" --gtest_filter='Gpu.*' 2>&1) || { echo "$said"; return 1; }
  echo "$said"
  ! grep -q '\[  SKIPPED \]' <<<"$said"
}

step gpu nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=OFF -DLOOM_CUDA=on \
  -DLOOM_TORCH="${LOOM_TORCH:-$(command -v python3)}" -DCMAKE_PREFIX_PATH="$PWD/.device/prefix" || exit 1
[ "${1:-}" = --configure-only ] && exit 0
step build cmake --build "$build" -j "$(nproc)" --target loom_cli loom_unit_tests loom_plan_tests || exit 1
step version "$build/bin/loom" --version
step gpu_tests gpu_tests
step unit_tests env LOOM_SOURCE_DIR="$PWD" "$build/bin/loom_unit_tests" --gtest_brief=1
step plan_tests env LOOM_SOURCE_DIR="$PWD" "$build/bin/loom_plan_tests" --gtest_brief=1
step train "$build/bin/loom" train -c configs/gpt-tiny.toml --set train.steps=20 --peak-flops 1e12 --quiet \
  --metrics "$out/train.jsonl"
step gemm_gpu_bf16 "$build/bin/loom" bench gemm --device cuda --dtype bfloat16 --seconds 0.3
step gemm_gpu_fp32 "$build/bin/loom" bench gemm --device cuda --dtype float32 --seconds 0.3
step train_gpu "$build/bin/loom" train -c configs/gpt-tiny.toml --set train.steps=20 --set train.device=cuda \
  --peak-flops 1e12 --quiet --metrics "$out/train_gpu.jsonl"

#!/usr/bin/env bash
# Checkpoints across hosts (NOTE [Test cluster], NOTE [Resuming]): a run saved on some hosts of the
# test cluster resumes on fewer, in another layout, and trains the same model as one process.
#   2 -> 1   4 steps on 2 hosts x 2 ranks (dp 2 x tp 2), then steps 5..8 on 1 host x 2 (dp 2)
#   3 -> 2   4 steps on 3 hosts x 1 rank (dp 3), then steps 5..8 on 2 hosts x 1 (pp 2)
# Each continuation's losses and final weights equal those of one process that saved at step 4 and
# continued, in float64 at 1e-9 relative (other layouts sum in other orders).
# Exits 77 (ctest: skipped) with the reason where namespaces cannot be made.
#   usage: resume.sh LOOM
set -euo pipefail
source "$(dirname "$0")/cluster_test.sh"
cluster_test loomr 10.75.0 "$1"
cd "$work"
fail() { echo "FAIL: $*"; [ -s err.txt ] && tail -20 err.txt; exit 1; }
# 6 micro-batches a step, so dp can be 1, 2, 3 or 6.
tiny_model --quiet --set train.global_batch=12 --set train.micro_batch=2
# on HOSTS SLOTS ARGS...: `loom train` on a cluster of HOSTS x SLOTS, one rank per slot.
on() {
  local hosts=$1 slots=$2 rc=0
  shift 2
  "$cluster" up "$hosts" --slots "$slots" >/dev/null || rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  "$cluster" mpirun -np $((hosts * slots)) "$loom" train "${tiny[@]}" "$@" 2> err.txt ||
    fail "loom train $* on $hosts x $slots"
  "$cluster" down
}
# same NAME A.jsonl B.jsonl A.safetensors B.safetensors: equal losses and weights at 1e-9 relative.
same() { "$root/tests/netns/same_weights.py" "$1" "$4" "$5" "$2" "$3" || fail "$1 differs from the serial run"; }

# The serial run: saves at step 4, continues to 8.
"$loom" train "${tiny[@]}" --set train.steps=4 --set checkpoint.dir=serial4 2> err.txt || fail "the serial run"
"$loom" train "${tiny[@]}" --set train.steps=8 --set checkpoint.dir=serial8 --resume serial4/step-0000004 \
  --metrics serial.jsonl 2> err.txt || fail "the serial continuation"
"$loom" ckpt export serial8 --dtype float64 --out serial.safetensors > /dev/null

on 2 2 --set train.steps=4 --set parallel.dp=2 --set parallel.tp=2 --set checkpoint.dir=a4
on 1 2 --set train.steps=8 --set parallel.dp=2 --set checkpoint.dir=a8 --resume a4/step-0000004 --metrics a.jsonl
"$loom" ckpt export a8 --dtype float64 --out a.safetensors > /dev/null
same "2 hosts x 2 -> 1 host x 2" a.jsonl serial.jsonl a.safetensors serial.safetensors

on 3 1 --set train.steps=4 --set parallel.dp=3 --set checkpoint.dir=b4
on 2 1 --set train.steps=8 --set parallel.pp=2 --set checkpoint.dir=b8 --resume b4/step-0000004 --metrics b.jsonl
"$loom" ckpt export b8 --dtype float64 --out b.safetensors > /dev/null
same "3 hosts x 1 -> 2 hosts x 1" b.jsonl serial.jsonl b.safetensors serial.safetensors

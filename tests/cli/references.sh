#!/usr/bin/env bash
# references.sh LOOM SOURCE_DIR MPIEXEC...: loom against PyTorch's reference models
# (bench/torch_reference.py) on the same weights, a `loom ckpt export` (tests/cli/reference_check.py),
# where before only loom's own paths agreed with each other:
# - bfloat16 over 2 ranks: a GPT and a Llama (8 query heads on 2 kv heads) trained 3 steps with
#   tp = 2 in bfloat16; the export of that checkpoint (the tp shards gathered) loads into the
#   reference, and loom's step 4 on those weights (loss and gradient norm, before the update)
#   equals PyTorch autocast's to bfloat16's precision;
# - generation: the same two models trained in float32 until they hold the sentence; loom's greedy
#   continuation (decoding with its key/value cache) is the reference's, token for token.
# Needs the PyTorch whose libtorch loom links (LOOM_TORCH_PYTHON); without one (a LibTorch folder)
# it is reported skipped (exit 77).
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/../../scripts/skip.sh"
loom=$1 src=$2
shift 2
mpiexec=("$@")
torch_python=${LOOM_TORCH_PYTHON:-}
if [ -z "$torch_python" ]; then
  skip torch "no python3 with torch (LOOM_TORCH is a LibTorch folder)"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
check() { "$torch_python" "$src/tests/cli/reference_check.py" "$@"; }
metric() {  # metric FILE STEP KEY: the value of KEY in step STEP's record
  /usr/bin/python3 -c 'import json,sys; print(repr(next(json.loads(l)[sys.argv[3]] for l in open(sys.argv[1])
                      if json.loads(l)["step"] == int(sys.argv[2]))))' "$@"
}
printf 'loom trains the same model anywhere!' | head -c 33 >"$dir/text.txt"  # one sample: seq + 1 tokens
"$loom" data prepare --text "$dir/text.txt" --out "$dir/one.bin" >/dev/null
common=(--peak-flops 1e10 --set data.source="tokens:$dir/one.bin" --set model.vocab=256 --set model.d_model=32
        --set model.n_layers=2 --set model.seq_len=32 --set train.warmup=1 --set train.threads=1 --quiet)
gpt=(-c "$src/configs/gpt-tiny.toml" "${common[@]}" --set model.n_heads=4)
gpt_shape=(32 4 4)
llama=(-c "$src/configs/llama-tiny.toml" "${common[@]}" --set model.n_heads=8 --set model.n_kv_heads=2
       --set model.ffn_multiple_of=16)
llama_shape=(32 8 4)
llama_ref=(--llama 2 16 10000)

# each CHECK NAME CONFIG... -- REFERENCE ARGS...: CHECK NAME, with `config` (loom's arguments) and
# `ref` (the reference's shape: SEQ HEADS FFN_MULT, then any --llama ...) set.
each() {
  local fn=$1 name=$2
  shift 2
  config=() ref=()
  while [ "$1" != "--" ]; do config+=("$1"); shift; done
  shift
  ref=("$@")
  "$fn" "$name"
}

# bfloat16, tp = 2: checkpoint after step 3, export it, resume for step 4's loss and norm.
bf16() {
  local name=$1
  local run=("${config[@]}" --set model.dtype=bfloat16 --set parallel.tp=2 --set train.steps=6 --set train.lr=5e-2
             --set checkpoint.dir="$dir/$name")
  "${mpiexec[@]}" -n 2 "$loom" train "${run[@]}" --stop-after 3
  "$loom" ckpt export "$dir/$name/step-0000003" --out "$dir/$name.safetensors" >/dev/null
  "${mpiexec[@]}" -n 2 "$loom" train "${run[@]}" --resume auto --stop-after 4 --metrics "$dir/$name.jsonl"
  echo "$name, bfloat16 over tp = 2:"
  check bf16 "$dir/$name.safetensors" "$dir/one.bin" "${ref[0]}" "${ref[1]}" "${ref[2]}" \
    "$(metric "$dir/$name.jsonl" 4 loss)" "$(metric "$dir/$name.jsonl" 4 grad_norm)" "${ref[@]:3}"
}
each bf16 gpt "${gpt[@]}" -- "${gpt_shape[@]}"
each bf16 llama "${llama[@]}" -- "${llama_shape[@]}" "${llama_ref[@]}"

# Greedy generation, float32: trained until the sentence is learnt, then continued from its start.
greedy() {
  local name=$1
  "$loom" train "${config[@]}" --set train.steps=40 --set train.lr=2e-2 --set checkpoint.dir="$dir/g$name"
  "$loom" ckpt export "$dir/g$name" --out "$dir/g$name.safetensors" >/dev/null
  local said
  said=$("$loom" generate --checkpoint "$dir/g$name" --prompt "loom trains" --temperature 0 --max-tokens 16 2>/dev/null)
  echo "$name, greedy: 'loom trains' -> '$said'"
  check greedy "$dir/g$name.safetensors" "${ref[0]}" "${ref[1]}" "${ref[2]}" "loom trains" "$said" "${ref[@]:3}"
}
each greedy gpt "${gpt[@]}" -- "${gpt_shape[@]}"
each greedy llama "${llama[@]}" -- "${llama_shape[@]}" "${llama_ref[@]}"
echo "ok: loom agrees with the PyTorch references"

#!/usr/bin/env bash
# ckpt_export.sh LOOM SOURCE_DIR: `loom ckpt` end to end. A GPT trained 3 steps on a token file
# of one sample (seq + 1 tokens, so every window is the whole file) is saved; `inspect` and
# `verify` read the checkpoint; `export` writes one safetensors file,
# which PyTorch's reference GPT (bench/torch_reference.py) loads to reproduce loom's loss for
# those weights (the loss of step 4 of the resumed run, computed before its update) within 1e-5;
# the same for a Llama in PyTorch's reference Llama.
# Export never writes over an input, and a damaged checkpoint is refused by verify with exit 2.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/../../scripts/skip.sh"
loom=$1 src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'loom trains the same model anywhere!' | head -c 33 >"$dir/text.txt"
"$loom" data prepare --text "$dir/text.txt" --out "$dir/one.bin" >/dev/null
model=(-c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 --set data.source="tokens:$dir/one.bin"
       --set model.vocab=256 --set model.d_model=32 --set model.n_layers=2 --set model.n_heads=4
       --set model.seq_len=32 --set train.steps=6 --set train.warmup=1 --set train.lr=5e-2 --set train.threads=1
       --set checkpoint.dir="$dir/ck" --quiet)
"$loom" train "${model[@]}" --stop-after 3 --metrics "$dir/m.jsonl"
"$loom" ckpt inspect "$dir/ck/step-0000003" --tensors >"$dir/inspect.txt"
grep -q '^checkpoint .*step 3, format version 1' "$dir/inspect.txt"
grep -q 'blocks.1.mlp.up.weight F32 \[128, 32\]' "$dir/inspect.txt"
grep -q 'checksums ok' "$dir/inspect.txt"
said=$("$loom" ckpt verify "$dir/ck/step-0000003")
grep -q 'every checksum ok' <<<"$said"
said=$("$loom" ckpt verify "$dir/ck")
grep -q 'step-0000003 (step 3).*every checksum ok' <<<"$said"  # checkpoint.dir: its latest
said=$("$loom" ckpt export "$dir/ck/step-0000003" --out "$dir/w.safetensors")
grep -q 'wrote 29 tensors' <<<"$said"
cp "$dir/m.jsonl" "$dir/first.jsonl"
"$loom" train "${model[@]}" --resume auto --stop-after 4 --metrics "$dir/m.jsonl"
# The resumed run continues the metrics file: the first run's 3 steps, then step 4.
[ "$(head -3 "$dir/m.jsonl")" = "$(cat "$dir/first.jsonl")" ]
[ "$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l)["step"] for l in open(sys.argv[1])])' "$dir/m.jsonl")" = "[1, 2, 3, 4]" ]
loss=$(/usr/bin/python3 -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readlines()[3])["loss"]))' "$dir/m.jsonl")
# In the PyTorch whose libtorch loom links (LOOM_TORCH_PYTHON, cmake/torch.cmake); a LibTorch folder
# has no interpreter, and this check is then reported skipped (exit 77) after the rest has run.
torch_python=${LOOM_TORCH_PYTHON:-}
[ -z "$torch_python" ] || "$torch_python" "$src/tests/cli/export_check.py" "$dir/w.safetensors" "$dir/one.bin" 32 4 4 "$loss"
# The same for a Llama (8 query heads on 2 kv heads, rotary, SwiGLU, its own head): the export loads
# into PyTorch's Llama and gives the loss loom computed for those weights.
llama=(-c "$src/configs/llama-tiny.toml" --peak-flops 1e10 --set data.source="tokens:$dir/one.bin"
       --set model.vocab=256 --set model.d_model=32 --set model.n_layers=2 --set model.n_heads=8
       --set model.n_kv_heads=2 --set model.ffn_multiple_of=16 --set model.seq_len=32 --set train.steps=6
       --set train.warmup=1 --set train.lr=5e-2 --set train.threads=1 --set checkpoint.dir="$dir/ckl" --quiet)
"$loom" train "${llama[@]}" --stop-after 3
"$loom" ckpt export "$dir/ckl/step-0000003" --out "$dir/l.safetensors" >/dev/null
"$loom" train "${llama[@]}" --resume auto --stop-after 4 --metrics "$dir/ml.jsonl"
loss=$(/usr/bin/python3 -c 'import json,sys; r = [json.loads(l) for l in open(sys.argv[1])]; assert r[0]["step"] == 4; print(repr(r[0]["loss"]))' "$dir/ml.jsonl")
[ -z "$torch_python" ] ||
  "$torch_python" "$src/tests/cli/export_check.py" "$dir/l.safetensors" "$dir/one.bin" 32 8 4 "$loss" --llama 2 16 10000
# Never over an input: --out naming a checkpoint file is refused and the file is unchanged.
file="$dir/ck/step-0000003/rank-00000.safetensors"
before=$(sha256sum "$file")
set +e
"$loom" ckpt export "$dir/ck/step-0000003" --out "$file" 2>"$dir/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q '^loom: error: ' "$dir/err.txt" && [ "$(wc -l <"$dir/err.txt")" -eq 1 ]
[ "$(sha256sum "$file")" = "$before" ]
# One flipped byte in the data: verify names the file and exits 2.
size=$(stat -c %s "$file")
printf '\x5a' | dd of="$file" bs=1 seek=$((size - 7)) conv=notrunc status=none
set +e
"$loom" ckpt verify "$dir/ck/step-0000003" 2>"$dir/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q 'rank-00000.safetensors: tensor .* fails its checksum' "$dir/err.txt"
if [ -z "$torch_python" ]; then
  skip torch "the exported weights in PyTorch's GPT (LOOM_TORCH is a LibTorch folder: no python3 with torch)"
fi
echo "ok: ckpt inspect, verify and export"

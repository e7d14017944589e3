#!/usr/bin/env bash
# generate.sh LOOM SOURCE_DIR: `loom generate` end to end (issue 18, docs/generate.md).
# - A small GPT memorises a short repeated text (byte level); greedy generation from a prefix
#   continues with the text itself, past the context's end in a sliding window (and says so), from the
#   checkpoint.dir or a step directory, with the key/value cache or recomputing every token.
# - A BPE run's checkpoint generates with the tokenizer its token file's sidecar names.
# - Sampling with a seed repeats exactly; another seed gives another text.
# - Checkpoints saved by tp = 2 (a vocabulary of 257 padded to 258), pp = 2 and dp = 2 under ZeRO-3
#   runs load into the serial model: the same float64 run in those layouts samples the very same
#   text as serially
#   (trained on data.source = "text:PATH": byte level, any vocabulary of at least 256).
# - A prompt longer than the context is read from its end, and the run says so.
# - Bad input, one `loom: error:` line, exit 2, nothing on stdout: a DLRM checkpoint, a missing or damaged checkpoint, out-of-range flags, a missing
#   tokenizer model (given, or beside the token file), synthetic data without --tokenizer, an empty
#   prompt.
set -euo pipefail
loom=$1 src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
expect_error() { "$src/tests/cli/expect_error.sh" "$loom" "$@"; }

# The text: one sentence of 82 bytes, 20 times.
sentence='the quick brown fox jumps over the lazy dog; loom trains the same model anywhere. '
text=""
for _ in $(seq 20); do text+=$sentence; done
printf '%s' "$text" >"$dir/text.txt"
"$loom" data prepare --text "$dir/text.txt" --out "$dir/text.bin" >/dev/null
"$loom" train -c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 --quiet --set data.source="tokens:$dir/text.bin" \
  --set model.vocab=256 --set model.d_model=64 --set model.n_layers=2 --set model.n_heads=4 --set model.seq_len=64 \
  --set train.steps=150 --set train.warmup=10 --set train.global_batch=8 --set train.micro_batch=8 \
  --set train.lr=3e-3 --set train.threads=1 --set checkpoint.dir="$dir/ck"

# Greedy: the prompt's 19 bytes, then the text itself: 46 tokens fill the context of 64 positions (a
# token is chosen from the last fed position's logits: 64 - 19 + 1 = 46), and the window slides on
# for the other 54 (NOTE [Sliding window]); the model learnt the text, so it continues it.
prompt='the quick brown fox'
want=${text:19:100}
"$loom" generate --checkpoint "$dir/ck" --prompt "$prompt" --temperature 0 --max-tokens 100 >"$dir/greedy.txt" \
  2>"$dir/greedy.err"
[ "$(cat "$dir/greedy.txt")" = "$want" ] || { echo "FAIL: greedy continuation '$(cat "$dir/greedy.txt")', want '$want'"; exit 1; }
grep -q "the sequence filled the model's context of 64 positions after 46 tokens; the 54 after them were each chosen from the last 64 tokens (a sliding window)" "$dir/greedy.err"
# --max-tokens ends it first, silently; a step directory loads as its checkpoint.dir does; so does
# recomputing every token instead of caching.
got=$("$loom" generate --checkpoint "$dir/ck/step-0000150" --prompt 'loom trains' --temperature 0 --max-tokens 20 2>"$dir/short.err")
[ "$got" = ' the same model anyw' ] || { echo "FAIL: '$got'"; exit 1; }
[ ! -s "$dir/short.err" ]
got=$("$loom" generate --checkpoint "$dir/ck" --prompt 'loom trains' --temperature 0 --max-tokens 20 --no-cache)
[ "$got" = ' the same model anyw' ] || { echo "FAIL: --no-cache gave '$got'"; exit 1; }
echo "ok: greedy generation continues the trained text"

# A BPE run: the token file's sidecar names its tokenizer, which generate finds by itself; the
# greedy text is the trained text's continuation (to the context of 32 tokens), as with the model
# given by --tokenizer.
"$loom" data prepare --text "$dir/text.txt" --tokenizer bpe --vocab 300 --out "$dir/bpe.bin" >/dev/null
"$loom" train -c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 --quiet --set data.source="tokens:$dir/bpe.bin" \
  --set model.vocab=auto --set model.d_model=64 --set model.n_layers=2 --set model.n_heads=4 --set model.seq_len=32 \
  --set train.steps=150 --set train.warmup=10 --set train.global_batch=8 --set train.micro_batch=8 \
  --set train.lr=3e-3 --set train.threads=1 --set checkpoint.dir="$dir/bpe"
got=$("$loom" generate --checkpoint "$dir/bpe" --prompt "$prompt" --temperature 0 2>/dev/null)
[ ${#got} -ge 10 ] && [ "${text:19:${#got}}" = "$got" ] || { echo "FAIL: bpe greedy continuation '$got'"; exit 1; }
again=$("$loom" generate --checkpoint "$dir/bpe" --prompt "$prompt" --temperature 0 \
        --tokenizer "$dir/bpe.bin.tokenizer.model" 2>/dev/null)
[ "$again" = "$got" ] || { echo "FAIL: --tokenizer gave '$again', the sidecar's '$got'"; exit 1; }
echo "ok: a bpe run continues its text with the token file's tokenizer"

# Sampling: a seed repeats; another seed samples other text (at temperature 3 it wanders off).
sample() { "$loom" generate --checkpoint "$dir/ck" --prompt "$prompt" --temperature 3 --top-k 50 --top-p 0.95 "$@"; }
sample --seed 5 >"$dir/a.txt" 2>/dev/null
sample --seed 5 >"$dir/b.txt" 2>/dev/null
sample --seed 6 >"$dir/c.txt" 2>/dev/null
cmp -s "$dir/a.txt" "$dir/b.txt" || { echo "FAIL: the same seed sampled different text"; exit 1; }
! cmp -s "$dir/a.txt" "$dir/c.txt" || { echo "FAIL: seeds 5 and 6 sampled the same text"; exit 1; }
echo "ok: sampling with a seed repeats"

# Layouts: the same float64 run serially, over tp = 2, over pp = 2 and over dp = 2 with ZeRO-3 (each
# rank saves only its owned ranges) samples the same text.
layout_run=(-c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 --quiet --set data.source="text:$dir/text.txt"
            --set model.vocab=257 --set model.d_model=32 --set model.n_layers=2 --set model.n_heads=4
            --set model.seq_len=32 --set model.dtype=float64 --set train.steps=20 --set train.warmup=2
            --set train.global_batch=4 --set train.micro_batch=2 --set train.lr=3e-3 --set train.threads=1)
"$loom" train "${layout_run[@]}" --set checkpoint.dir="$dir/serial"
"$src/scripts/mpirun.sh" 2 "$loom" train "${layout_run[@]}" --set parallel.tp=2 --set checkpoint.dir="$dir/tp2"
"$src/scripts/mpirun.sh" 2 "$loom" train "${layout_run[@]}" --set parallel.pp=2 --set checkpoint.dir="$dir/pp2"
"$src/scripts/mpirun.sh" 2 "$loom" train "${layout_run[@]}" --set parallel.dp=2 --set parallel.zero=3 \
  --set checkpoint.dir="$dir/zero3"
for layout in serial tp2 pp2 zero3; do
  "$loom" generate --checkpoint "$dir/$layout" --prompt 'the quick' --temperature 1.5 --seed 9 --max-tokens 23 \
    >"$dir/$layout.txt"
done
cmp "$dir/serial.txt" "$dir/tp2.txt"
cmp "$dir/serial.txt" "$dir/pp2.txt"
cmp "$dir/serial.txt" "$dir/zero3.txt"
echo "ok: tp = 2, pp = 2 and ZeRO-3 checkpoints sample what the serial one does"

# Bad input.
"$loom" train -c "$src/configs/dlrm-sparse.toml" --peak-flops 1e10 --quiet --set parallel.dp=1 \
  --set model.table_rows=1000 --set model.d_model=8 --set "model.bottom_mlp=[16]" --set "model.top_mlp=[16]" \
  --set train.steps=1 --set train.warmup=0 --set train.global_batch=8 --set train.micro_batch=8 \
  --set checkpoint.dir="$dir/dlrm"
expect_error 'holds a model.kind = "dlrm" model, which cannot generate text' generate --checkpoint "$dir/dlrm" --prompt hi
# A prompt longer than the context is read from its end, and the run says so.
long="$(printf 'x%.0s' $(seq 40))$text"
"$loom" generate --checkpoint "$dir/ck" --prompt "${long:0:70}" --temperature 0 --max-tokens 5 >/dev/null 2>"$dir/long.err"
grep -q "the prompt is 70 tokens, longer than the model's context of 64 positions: its first 6 were not read" "$dir/long.err" ||
  { echo "FAIL: long prompt: $(cat "$dir/long.err")"; exit 1; }
expect_error "--prompt is empty" generate --checkpoint "$dir/ck" --prompt ''
expect_error "does not exist" generate --checkpoint "$dir/nothing" --prompt hi
cp -r "$dir/ck/step-0000150" "$dir/cut"
file="$dir/cut/rank-00000.safetensors"
truncate -s -1 "$file"
expect_error "rank-00000.safetensors has" generate --checkpoint "$dir/cut" --prompt hi
cp -r "$dir/ck/step-0000150" "$dir/flipped"
file="$dir/flipped/rank-00000.safetensors"
# A byte inside a weight's data (not an optimizer moment's, which generation does not read).
offset=$(/usr/bin/python3 -c '
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
key = next(k for k in header if k.startswith("blocks.0.attn.qkv.weight@"))
print(8 + n + header[key]["data_offsets"][0] + 3)' "$file")
printf '\x5a' | dd of="$file" bs=1 seek="$offset" conv=notrunc status=none
expect_error "fails its checksum" generate --checkpoint "$dir/flipped" --prompt hi
expect_error "--temperature -1 must be" generate --checkpoint "$dir/ck" --prompt hi --temperature -1
expect_error "--top-k -2 must be" generate --checkpoint "$dir/ck" --prompt hi --top-k -2
expect_error "--top-p 0 must be in (0, 1]" generate --checkpoint "$dir/ck" --prompt hi --top-p 0
expect_error "--top-p 1.5 must be in (0, 1]" generate --checkpoint "$dir/ck" --prompt hi --top-p 1.5
expect_error "--max-tokens 0 must be >= 1" generate --checkpoint "$dir/ck" --prompt hi --max-tokens 0
expect_error "$dir/none.model" generate --checkpoint "$dir/ck" --prompt hi --tokenizer "$dir/none.model"
mv "$dir/bpe.bin.tokenizer.model" "$dir/moved.model"
expect_error "bpe.bin.tokenizer.model" generate --checkpoint "$dir/bpe" --prompt hi
"$loom" train -c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 --quiet --set model.vocab=256 --set model.d_model=32 \
  --set model.n_layers=1 --set model.n_heads=4 --set model.seq_len=16 --set train.steps=1 --set train.warmup=0 \
  --set train.global_batch=2 --set train.micro_batch=2 --set checkpoint.dir="$dir/synthetic"
expect_error 'names no tokenizer; hint: --tokenizer PATH (a SentencePiece model' generate --checkpoint "$dir/synthetic" --prompt hi
echo "ok: loom generate"

#!/usr/bin/env bash
# hf.sh LOOM SOURCE_DIR: Hugging Face model folders in and out (NOTE [Hugging Face layout]), with
# tiny folders tests/hf/hf_check.py writes and its forwards of Llama and GPT-2, written from their
# definitions with the Hugging Face conventions.
#  1. Round trips: folder -> `loom ckpt import` -> `loom ckpt export --to hf` gives the same tensors
#     byte for byte: Llama untied (float32), tied (bfloat16), sharded (float16); GPT-2 float32,
#     bfloat16, sharded float16 (shards in and out).
#  2. The same logits: `loom eval --logits` of the imported checkpoint against the reference's
#     forward on the folder, within 1e-5 (float32): Llama untied and tied, GPT-2.
#  3. --init at dp=2 x tp=2: a step of learning rate 1e-30 leaves the weights as imported (the
#     export is the original folder, byte for byte); 50 steps of fine-tuning, exported, give in
#     the reference the loss `loom eval` gives the last checkpoint (1e-5), and the log-likelihood
#     of each choice of a few multiple-choice questions `loom eval --choices` gives (1e-5).
#  4. Byte-level BPE: `loom data prepare --tokenizer` with a tokenizer trained here, read from
#     vocab.json and merges.txt or from a tokenizer.json (with an added token), writes the ids the
#     reference (tests/hf/bpe_reference.py) gives on a text of many scripts, numbers and spaces; a
#     GPT-2 folder's tokenizer.json comes back out of the export unchanged.
#  5. Bad input: one `loom: error:` line naming the key or file, exit 2, nothing written.
# Needs PyTorch's interpreter (LOOM_TORCH_PYTHON); without one it reports itself skipped (77).
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/../../scripts/skip.sh"
loom=$1 src=$2
py=${LOOM_TORCH_PYTHON:-}
if [ -z "$py" ]; then
  skip torch "no python3 with torch (LOOM_TORCH is a LibTorch folder)"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
check() { "$py" -W ignore "$src/tests/hf/hf_check.py" "$@"; }
head -c 4000 "$src/README.md" >text.txt

# 1. Round trips.
while read -r arch dtype flags shard; do
  rm -rf f ck back
  check make "$arch" "$dtype" f $flags
  "$loom" ckpt import --from hf f --out ck >/dev/null
  "$loom" ckpt export ck --to hf --dtype "$dtype" --out back $shard >/dev/null
  check same f back
done <<'CASES'
llama float32 --no-tie
llama bfloat16 --tied
llama float16 --shards=3 --shard-mb=0.05
gpt2 float32 --no-tie
gpt2 bfloat16 --tied
gpt2 float16 --shards=2 --shard-mb=0.05
CASES
[ -f back/model.safetensors.index.json ] || { echo "FAIL: no index of shards"; exit 1; }
[ "$(ls back | grep -c '^model-.*-of-.*\.safetensors$')" -ge 2 ] || { echo "FAIL: not sharded"; exit 1; }
"$loom" ckpt export ck --to hf --dtype float16 --out again/ >/dev/null  # "DIR/" is the folder DIR
check same f again

# 2. The same logits.
for arch in "llama --no-tie" "llama --tied" "gpt2 --tied" "gpt2 --no-tie" "gpt2 --bare"; do
  rm -rf f ck logits.safetensors
  check make ${arch%% *} float32 f ${arch#* }
  "$loom" ckpt import --from hf f --out ck >/dev/null
  "$loom" eval --checkpoint ck --data text:text.txt --seq 32 --batch 2 --windows 3 --logits logits.safetensors >/dev/null
  check logits f logits.safetensors
done

# 3. --init at dp=2 x tp=2, with the model section the import prints.
rm -rf f ck
check make llama float32 f --no-tie
"$loom" ckpt import --from hf f --out ck | sed -n '/^\[model\]/,$p' >ft.toml
cat >>ft.toml <<'TOML'
seq_len = 32

[train]
global_batch = 8
micro_batch = 2
threads = 1
warmup = 0

[data]
source = "text:text.txt"
TOML
sed -i '0,/^seq_len = 64$/{/^seq_len = 64$/d}' ft.toml
run() { "$src/scripts/mpirun.sh" 4 "$loom" train -c ft.toml --init ck --quiet --set parallel.dp=2 --set parallel.tp=2 "$@"; }
run --set train.steps=1 --set train.lr=1e-30 --set checkpoint.dir=still
"$loom" ckpt export still --to hf --out still.hf >/dev/null
check same f still.hf
run --set train.steps=50 --set train.lr=3e-3 --set checkpoint.dir=tuned --metrics m.jsonl
"$loom" ckpt export tuned --to hf --out tuned.hf >/dev/null
loss=$("$loom" eval --checkpoint tuned --data text:text.txt --seq 32 --windows 4 |
       "$py" -c 'import json, sys; print(repr(json.load(sys.stdin)["loss"]))')
first=$("$py" -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' m.jsonl)
"$py" -c 'import sys; a, b = map(float, sys.argv[1:]); assert b < a - 1, f"fine-tuning went from {a} to {b}"' "$first" "$loss"
check loss tuned.hf text.txt 32 4 "$loss"
# Multiple choice: each choice's log-likelihood given its context, as the reference's.
cat >questions.jsonl <<'JSONL'
{"context": "loom trains the same model", "choices": [" anywhere", " nowhere", " sometimes"], "answer": 0}
{"context": "Any parallel layout trains the same model as", "choices": [" one process.", " a cat.", " xyz"], "answer": 0}
{"context": "The quick brown fox jumps over the lazy dog, then over the lazy dog again and again", "choices": [" again", " dog"], "answer": 1}
JSONL
accuracy=$("$loom" eval --checkpoint tuned --choices questions.jsonl --scores scores.jsonl |
           "$py" -c 'import json, sys; print(json.load(sys.stdin)["accuracy"])')
check choices tuned.hf questions.jsonl scores.jsonl "$accuracy" 32  # the run's seq_len: loom eval's context

# 4. Byte-level BPE.
check varied varied.txt
cat "$src/README.md" varied.txt >train.txt
check bpe-make train.txt pair json 200
"$loom" data prepare --text varied.txt --tokenizer pair --out pair.bin >/dev/null
check bpe-ids pair varied.txt pair.bin
"$loom" data prepare --text varied.txt --tokenizer json/tokenizer.json --out json.bin >/dev/null
check bpe-ids json varied.txt json.bin
check make gpt2 float32 g --vocab 512 && cp json/tokenizer.json g/
"$loom" ckpt import --from hf g --out gck >/dev/null
"$loom" ckpt export gck --to hf --out gback >/dev/null
cmp g/tokenizer.json gback/tokenizer.json

# 5. Bad input.
refused() {  # PATTERN COMMAND...: exit 2, one error line with PATTERN
  local pattern=$1 rc=0
  shift
  "$@" >out.txt 2>err.txt || rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q '^loom: error: ' err.txt && grep -qF -- "$pattern" err.txt ||
    { echo "FAIL: $* (exit $rc):"; cat out.txt err.txt; exit 1; }
}
edit() {  # FOLDER PYTHON: config.json changed by PYTHON on `c`
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); $2; json.dump(c, open(sys.argv[1], 'w'))" "$1/config.json"
}
rm -rf bad && cp -r f bad && edit bad 'del c["hidden_size"]'
refused '"hidden_size" is missing' "$loom" ckpt import --from hf bad --out new
rm -rf bad && cp -r f bad && edit bad 'c["model_type"] = "gpt2"'
refused 'contradicts "model_type"' "$loom" ckpt import --from hf bad --out new
rm -rf bad && cp -r f bad && edit bad 'c["architectures"] = ["MistralForCausalLM"]; c["model_type"] = "mistral"'
refused 'loom does not have' "$loom" ckpt import --from hf bad --out new
rm -rf bad && cp -r f bad && edit bad 'c["intermediate_size"] = 192'
refused 'mlp.gate_proj.weight is [176, 64], and config.json' "$loom" ckpt import --from hf bad --out new
rm -rf bad && cp -r f bad && edit bad 'c["rms_norm_eps"] = 1e-6'
refused '"rms_norm_eps" is 1e-06' "$loom" ckpt import --from hf bad --out new
rm -rf bad && cp -r f bad && edit bad 'c["num_hidden_layers"] = 1'
refused 'tensor model.layers.1.' "$loom" ckpt import --from hf bad --out new
rm -rf bad && check make gpt2 float32 bad --shards 2 && rm bad/model-00002-of-00002.safetensors
refused 'model-00002-of-00002.safetensors, which is missing' "$loom" ckpt import --from hf bad --out new
rm -rf bad && check make gpt2 float32 bad && cp json/tokenizer.json bad/
refused 'its tokenizer (byte-bpe) has 457 pieces, more than' "$loom" ckpt import --from hf bad --out new
[ ! -e new ]
mkdir full && touch full/mine.txt
refused 'is not an empty folder' "$loom" ckpt export ck --to hf --out full
[ "$(ls full)" = mine.txt ]
refused 'holds another model: model.n_layers = 3 (checkpoint: 2)' "$loom" train -c ft.toml --init ck --set model.n_layers=3
refused 'holds imported weights only' "$loom" train -c ft.toml --resume ck/step-0000000
echo '{"context": "x", "choices": ["a"], "answer": 1}' >bad.jsonl
refused 'bad.jsonl:1: "answer" 1 is not the index of one of its 1 choices' "$loom" eval --checkpoint tuned --choices bad.jsonl
echo '{"context": "x", "choices": "a", "answer": 0}' >bad.jsonl
refused 'bad.jsonl:1: not an object of "context"' "$loom" eval --checkpoint tuned --choices bad.jsonl
refused 'names no tokenizer' "$loom" eval --checkpoint ck --choices questions.jsonl
refused 'more than the model'"'"'s vocabulary of 320' "$loom" eval --checkpoint tuned --choices questions.jsonl --tokenizer json
cp text.txt text.before
refused '--logits' "$loom" eval --checkpoint tuned --data text:text.txt --logits text.txt
cmp text.txt text.before
mkdir llama3 && "$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated"}, j["pre_tokenizer"]]}; json.dump(j, open(sys.argv[2], "w"))' json/tokenizer.json llama3/tokenizer.json
refused 'with GPT-2'"'"'s pattern' "$loom" data prepare --text varied.txt --tokenizer llama3 --out l3.bin
[ ! -e l3.bin ]
echo "ok: Hugging Face folders in and out, the same logits, --init and fine-tuning at dp=2 x tp=2"

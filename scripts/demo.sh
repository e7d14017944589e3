#!/usr/bin/env bash
# The `make demo` run, the whole text workflow in a few minutes on 2 cores:
#   1. a BPE tokenizer trained on the license texts every Debian system ships, the token file and
#      a validation split of whole documents (loom data prepare);
#   2. gpt-tiny trained on them over 2 ranks with data parallelism, validated every 30 steps,
#      with a checkpoint, metrics and a trace (loom train);
#   3. a sample generated from the checkpoint (loom generate);
#   4. the loss curve as a picture (loom plot).
# Fails if the loss did not fall. Everything goes to out/demo/ (replaced on each run).
# scripts/demo-cluster.sh runs the same on two hosts: LOOM_DEMO_OUT, LOOM_DEMO_LAUNCH (the command
# that starts the ranks), LOOM_DEMO_LAYOUT (their --set options) and LOOM_DEMO_WHERE (its words).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${LOOM_DEMO_OUT:-out/demo}
read -r -a launch <<< "${LOOM_DEMO_LAUNCH:-scripts/mpirun.sh 2}"
read -r -a layout <<< "${LOOM_DEMO_LAYOUT:---set parallel.dp=2}"
where=${LOOM_DEMO_WHERE:-over 2 ranks (dp = 2)}
loom=$(pwd)/build/bin/loom
rm -rf "$out"
mkdir -p "$out"
licenses=/usr/share/common-licenses
texts=()
for name in Apache-2.0 Artistic BSD GFDL-1.3 GPL-2 GPL-3 LGPL-2.1 MPL-2.0; do
  [ -f "$licenses/$name" ] && texts+=("$licenses/$name")
done
[ ${#texts[@]} -ge 2 ] || { echo "loom: error: the demo needs the license texts of $licenses (Debian's base-files)" >&2; exit 2; }

echo "== 1/4 loom data prepare: a BPE tokenizer of 1000 pieces on ${#texts[@]} license texts"
"$loom" data prepare --text "${texts[@]}" --tokenizer bpe --vocab 1000 --valid-fraction 0.05 --out "$out/licenses.bin"

echo "== 2/4 loom train: gpt-tiny $where, validating every 30 steps"
"${launch[@]}" "$loom" train -c configs/demo.toml "${layout[@]}" --set checkpoint.dir="$out/checkpoints" \
  --set data.source="tokens:$out/licenses.bin" --set data.valid="tokens:$out/licenses.valid.bin" \
  --metrics "$out/metrics.jsonl" --trace "$out/trace.json" "$@"

echo "== 3/4 loom generate: a sample from the checkpoint"
prompt="This License"
{
  printf '%s' "$prompt"  # loom generate prints the continuation alone
  "$loom" generate --checkpoint "$out/checkpoints" --prompt "$prompt" --max-tokens 60 --temperature 0.8 --top-k 40 --seed 7
} | tee "$out/sample.txt"

echo "== 4/4 loom plot: the loss curve"
"$loom" plot "$out/metrics.jsonl" --label "gpt-tiny $where" --out "$out/loss.svg"

/usr/bin/python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
first, last = steps[0]["loss"], sum(s["loss"] for s in steps[-5:]) / min(5, len(steps))
val = [s["val_loss"] for s in steps if "val_loss" in s]
print(f"loom demo: loss {first:.3f} -> {last:.3f} (mean of the last 5 steps) over {len(steps)} steps; "
      f"validation loss {val[0]:.3f} -> {val[-1]:.3f} ({len(val)} passes)")
if not last < first - 1.0:
    sys.exit("loom: error: the demo's loss did not fall; the build is broken")
PY
cat <<EOF
loom demo: outputs in $out/
  licenses.bin (+ .json, .tokenizer.model)   the token file, its sidecar and the BPE tokenizer
  licenses.valid.bin                         the validation split (whole documents)
  metrics.jsonl                              one JSON object per step (loss, val_loss, tokens/s, ...)
  trace.json                                 every rank's events (open in Perfetto)
  checkpoints/                               the last checkpoint (loom ckpt inspect $out/checkpoints)
  sample.txt                                 the generated sample
  loss.svg                                   the loss curve
EOF

#!/usr/bin/env bash
# bench/generate.sh [LENGTH...]: `loom generate`'s time per token at several sequence lengths, with
# the key/value cache against recomputing the whole sequence for every token (--no-cache),
# measured in the same run on the same checkpoint (docs/generate.md has the figures).
# The model is gpt-small's shape (d_model 512, 8 layers, 8 heads, ffn 4x) at byte level (vocab
# 256) with a 1024-position table, trained one step so that a checkpoint exists: the weights do not
# matter to the time. At each LENGTH (default 32 64 128 256 512) the prompt is LENGTH bytes and
# the timed tokens are the next GENERATE - 1 (after the first, which the prefill gives); each
# figure is the median of ROUNDS runs. Prints one line per length and one JSON line per length.
# Environment: ROUNDS (3), GENERATE (9 tokens), THREADS (libtorch threads; all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bin/loom ] || { echo "loom: error: build/bin/loom is missing; run 'make' first" >&2; exit 2; }
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(32 64 128 256 512)
rounds=${ROUNDS:-3} generate=${GENERATE:-9}
[ -z "${THREADS:-}" ] || export OMP_NUM_THREADS=$THREADS
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for _ in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog; loom trains the same model anywhere. '; done \
  >"$dir/text.txt"
build/bin/loom train -c configs/gpt-small.toml --peak-flops 1e10 --quiet --set data.source="text:$dir/text.txt" \
  --set model.vocab=256 --set model.seq_len=64 --set model.max_positions=1024 --set train.steps=1 \
  --set train.warmup=0 --set train.global_batch=1 --set train.micro_batch=1 --set checkpoint.dir="$dir/ck"

# ms/token of one run (the --timing line's figure).
ms_per_token() {
  build/bin/loom generate --checkpoint "$dir/ck" --prompt "$(head -c "$1" "$dir/text.txt")" --temperature 0 \
    --max-tokens "$generate" --timing "${@:2}" 2>&1 >/dev/null | sed -n 's/.*(\([0-9.]*\) ms\/token.*/\1/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

printf '%8s %18s %22s %8s\n' tokens "cached ms/token" "recomputed ms/token" ratio >&2
for n in "${lengths[@]}"; do
  cached=() recomputed=()
  for _ in $(seq "$rounds"); do  # alternating, so that a slow moment of the host hits both
    cached+=("$(ms_per_token "$n")")
    recomputed+=("$(ms_per_token "$n" --no-cache)")
  done
  c=$(median "${cached[@]}") r=$(median "${recomputed[@]}")
  ratio=$(awk -v c="$c" -v r="$r" 'BEGIN {printf "%.1f", r / c}')
  printf '%8d %18.2f %22.2f %8s\n' "$n" "$c" "$r" "$ratio" >&2
  printf '{"bench": "generate", "model": "gpt-small shape, vocab 256", "tokens": %d, "cached_ms_per_token": %s, "recomputed_ms_per_token": %s, "ratio": %s, "rounds": %d}\n' \
    "$n" "$c" "$r" "$ratio" "$rounds"
done

#!/usr/bin/env bash
# smoke.sh LOOM SOURCE_DIR: the CLI end to end in a temporary directory: --version, config
# printing that reads back, data prepare, and a short training run on the prepared file that
# writes its metrics and trace; a DLRM trained on a clicks file; a pipeline schedule printed,
# written as CSV and read back.
set -euo pipefail
loom=$1 src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
said=$("$loom" --version)
grep -q '^loom [0-9]' <<<"$said"
grep -qE '^libtorch 2\.[0-9]+\.[0-9]+ \(BLAS [a-z]+, ' <<<"$said"
# MPI is built in exactly when the binary loads it (a build with LOOM_MPI=OFF says no).
# (ldd's text first: grep -q quitting early would fail the pipe under pipefail, now and then.)
mpi=no
libs=$(ldd "$loom")
grep -qE 'libmpi[._]' <<<"$libs" && mpi=yes
# NCCL's backend comes only with CUDA, and libnccl is loaded by a GPU rank, never at start.
grep -qE "^built in: CUDA (no, NCCL no|[0-9.]+, NCCL (yes|no)), MPI $mpi\$" <<<"$said"
! grep -q 'libnccl' <<<"$libs"
# `loom help` and `loom help COMMAND` are --help; every option's default is shown.
said=$("$loom" help)
grep -q '^  train ' <<<"$said"
said=$("$loom" help generate)
grep -qE -- '--max-tokens INT=64 ' <<<"$said"
said=$("$loom" help train)
grep -q -- '--metrics' <<<"$said"
bogus=$("$loom" train --bogus 2>&1) && exit 1
grep -q 'hint: loom train --help$' <<<"$bogus"
"$loom" config --print -c "$src/configs/gpt-tiny.toml" --set train.steps=7 >"$dir/printed.toml"
"$loom" config --print -c "$dir/printed.toml" | diff - "$dir/printed.toml"
grep -q '^steps = 7$' "$dir/printed.toml"
for i in $(seq 40); do cat "$src/README.md"; done >"$dir/text.txt"
said=$("$loom" data prepare --text "$dir/text.txt" --out "$dir/tokens.bin")
grep -q 'wrote' <<<"$said"
"$loom" train -c "$src/configs/gpt-tiny.toml" --peak-flops 1e10 \
  --set data.source="tokens:$dir/tokens.bin" --set model.vocab=256 --set model.d_model=32 \
  --set model.n_layers=1 --set model.seq_len=32 --set train.steps=3 --set train.threads=1 \
  --metrics "$dir/m.jsonl" --trace "$dir/t.json" >"$dir/out.txt"
grep -q 'step 3/3' "$dir/out.txt"
grep -qE '^loom: [0-9.]+k parameters \([0-9]+\), float32; 1 rank = dp 1 x tp 1 x pp 1 x sp 1, 1 thread per rank; data: ' \
  "$dir/out.txt" || { cat "$dir/out.txt"; exit 1; }
[ "$(wc -l <"$dir/m.jsonl")" -eq 3 ]
python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); assert isinstance(t, list) and t' "$dir/t.json"
grep -q '^loom: done: 3 steps, .* final loss' "$dir/out.txt"
[ "$(ls -A "$dir" | grep -c 'loom-partial')" -eq 0 ]
# A DLRM on a clicks file written from its synthetic clicks.
dlrm=(-c "$src/configs/dlrm-sparse.toml" --set parallel.dp=1 --set model.table_rows=1000 --set model.d_model=8
      --set "model.bottom_mlp=[16]" --set "model.top_mlp=[16]")
said=$("$loom" data clicks "${dlrm[@]}" --samples 600 --out "$dir/clicks.bin")
grep -q 'wrote 600 samples' <<<"$said"
[ "$(stat -c %s "$dir/clicks.bin")" -eq $((600 * 8 * (1 + 13 + 8))) ]
"$loom" train "${dlrm[@]}" --peak-flops 1e10 --set data.source="clicks:$dir/clicks.bin" --set train.steps=2 \
  --set train.global_batch=256 --set train.micro_batch=128 --set train.threads=1 >"$dir/dlrm.txt"
grep -q 'clicks file .* (600 records' "$dir/dlrm.txt"
grep -q 'step 2/2' "$dir/dlrm.txt"
# A pipeline schedule: the grid, its bubble fraction, and a CSV that reads back to the same grid.
"$loom" schedule --kind 1f1b --stages 4 --microbatches 8 --csv "$dir/s.csv" --svg "$dir/s.svg" >"$dir/grid.txt" \
  2>"$dir/wrote.txt"
grep -qx "loom: wrote the schedule as CSV to $dir/s.csv" "$dir/wrote.txt"
grep -qx "loom: wrote the simulated timeline as SVG to $dir/s.svg (opens in a browser)" "$dir/wrote.txt"
grep -q 'bubble fraction 0.2727' "$dir/grid.txt"
"$loom" schedule --from "$dir/s.csv" | tail -n +2 | diff - <(tail -n +2 "$dir/grid.txt")
echo "ok: CLI smoke"

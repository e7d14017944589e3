#!/usr/bin/env bash
# bench/run.sh [WORKLOAD...]: runs the workloads of docs/workloads.md that this build supports and
# prints one JSON line per run, with the peer measured in the same run and the ratio.
# WORKLOAD: gpt-tiny, gpt-tiny@dp2 (default: both), llama-small (beside PyTorch's Llama of the same
# shapes, bench/torch_reference.py --model llama), any configs/NAME.toml with @dpN or @tpN (and
# +overlapK, +seq), allreduce, tp-overlap, tp-sequence (loom against itself with the option off),
# pipelines, gpt-long, dlrm-sparse and gpt-bigvocab (sparse exchange against dense all-reduce),
# gpt-small-bf16, gpt-small-bf16@dp2, llama-small-bf16, llama-small-bf16@dp2 (any NAME-bf16[@dpN]:
# loom model.dtype=bfloat16, loom float32, PyTorch autocast bf16 and PyTorch float32 alternating;
# a loom bf16 run this build refuses is reported "unsupported").
# sparse-choice: parallel.sparse = auto beside forced on and off (gpt-tiny@dp2, gpt-bigvocab@dp2,
# dlrm-sparse@dp2 and @dp4; sparse-choice:NAME@dpN for one).
# checkpoint: gpt-small's save bandwidth against dd's into the same directory (BENCH_CKPT_DIR, else
# the temporary directory), the share of it an async save hides, and the load time.
# memory: the largest batch each memory policy trains under one per-rank budget (GPipe, 1F1B with
# recompute none/full/stage-aware or swap all, memory.policy = auto), auto's step time against the
# manual combinations at its batch, predicted against measured peaks and step times, and swap against
# keep (gpt-small at pp = 2 and 4, llama-small at pp = 2; memory:NAME or memory:NAME@ppN for one).
# torch2 (torch2:ROW for one row): the table of issue 34, loom on this build's PyTorch 2 beside loom on
# another build (BENCH_LOOM_OLD=path/to/loom, e.g. one on Debian's libtorch 1.13) and PyTorch 2 eager and
# torch.compile (BENCH_COMPILE=0: without it).
# versus:NAME[@layout]: this build against another loom binary (BENCH_BEFORE=path/to/loom, e.g. built
# at an earlier commit) on NAME, alternating in every round.
# Environment: BENCH_STEPS (timed steps per round, 8), BENCH_ROUNDS (3; memory: 2), THREADS (all cores),
# BENCH_LOCK (memory: a file to flock around each timed run, shared with builds on the same machine).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bin/loom ] || { echo "loom: error: build/bin/loom is missing; run 'make' first" >&2; exit 2; }
export OMP_NUM_THREADS=1
# The PyTorch peer runs in the interpreter whose libtorch this build links (cmake/torch.cmake).
python=$(sed -n 's/^LOOM_TORCH_PYTHON:[A-Z]*=//p' build/CMakeCache.txt)
[ -n "$python" ] || { echo "loom: error: this build's libtorch is a LibTorch folder (LOOM_TORCH), with no python3 to run the PyTorch peer; hint: build with LOOM_TORCH=/path/to/python3" >&2; exit 2; }
exec "$python" bench/run.py "$@"

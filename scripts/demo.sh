#!/usr/bin/env bash
# The `make demo` run: gpt-tiny on the embedded synthetic data with data parallelism over 2 ranks
# (the richest layout implemented so far), with progress on the console, metrics (JSON Lines)
# and one Chrome trace with a track per rank in out/demo/. Fails if the loss did not fall.
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/demo
mkdir -p "$out"
scripts/mpirun.sh 2 build/bin/loom train -c configs/demo.toml --set parallel.dp=2 \
  --metrics "$out/metrics.jsonl" --trace "$out/trace.json" "$@"
/usr/bin/python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
first, last = steps[0]["loss"], sum(s["loss"] for s in steps[-5:]) / min(5, len(steps))
dp_bytes = steps[-1]["comm_bytes_per_step"].get("dp", 0)
print(f"loom demo: loss {first:.3f} -> {last:.3f} (mean of the last 5 steps) over {len(steps)} steps, "
      f"dp all-reduce {dp_bytes / 2**20:.1f} MiB per step")
print("loom demo: metrics in out/demo/metrics.jsonl; the trace of both ranks in out/demo/trace.json (open in Perfetto)")
if not last < first - 1.0:
    sys.exit("loom: error: the demo's loss did not fall; the build is broken")
PY

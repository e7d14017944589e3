#!/usr/bin/env python3
"""same_weights.py NAME A.safetensors B.safetensors [A.jsonl B.jsonl]: the same float64 weights
(`loom ckpt export --dtype float64`) within 1e-9 relative to each tensor's largest value, and, with
two metrics files, the same steps with the same losses within 1e-9 relative. Prints one `ok:` line
with the largest difference; fails (exit 1) naming what differs."""
import array
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from safetensors_entries import safetensors_entries  # noqa: E402


def tensors(path):
    out = {}
    for key, entry, raw in safetensors_entries(path):
        if entry["dtype"] != "F64":
            sys.exit(f"{path}: {key} is {entry['dtype']}, not F64; hint: loom ckpt export --dtype float64")
        values = array.array("d", raw)
        if len(values) != math.prod(entry["shape"]) or not all(math.isfinite(v) for v in values):
            sys.exit(f"{path}: {key} does not hold {entry['shape']} finite values")
        out[key] = (entry["shape"], values)
    return out


def main():
    name, wa, wb = sys.argv[1:4]
    a, b = tensors(wa), tensors(wb)
    if a.keys() != b.keys() or not a:
        sys.exit(f"{name}: the weights differ in names: {sorted(a.keys() ^ b.keys())}")
    worst = 0.0
    for key in a:
        if a[key][0] != b[key][0]:
            sys.exit(f"{name}: {key} has shape {a[key][0]} against {b[key][0]}")
        scale = max(max(abs(v) for v in b[key][1]), 1e-300)
        worst = max(worst, max(abs(x - y) for x, y in zip(*(w[key][1] for w in (a, b)))) / scale)
    if not worst <= 1e-9:
        sys.exit(f"{name}: weights differ by {worst:.2e} relative")
    steps = ""
    if len(sys.argv) == 6:
        ma, mb = ([json.loads(line) for line in open(p)] for p in sys.argv[4:6])
        if [r["step"] for r in ma] != [r["step"] for r in mb] or not ma:
            sys.exit(f"{name}: steps {[r['step'] for r in ma]} against {[r['step'] for r in mb]}")
        for x, y in zip(ma, mb):
            if not abs(x["loss"] - y["loss"]) <= 1e-9 * abs(y["loss"]):
                sys.exit(f"{name}: step {x['step']}: loss {x['loss']!r} against {y['loss']!r}")
        steps = f"steps {ma[0]['step']}..{ma[-1]['step']} and "
    print(f"ok: {name}: {steps}{len(a)} weights equal (largest difference {worst:.1e} relative)")


main()

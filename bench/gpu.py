#!/usr/bin/env python3
"""The GPU benchmarks of issue 36 (docs/benchmarks.md, "On a GPU"), every figure from one run on one
GPU, so that the ratios compare like with like. scripts/device-check.sh runs it on a lent GPU
machine; it needs loom built with CUDA and PyTorch 2 with CUDA in this interpreter.

  peak       `loom bench gemm --device cuda` in bfloat16 and float32: the peaks MFU is measured
             against
  llama-1b   configs/llama-1b.toml (bf16, seq 4096) trained by loom on the GPU, beside
             bench/torch_reference.py's Llama of the same shapes, eager and under torch.compile
  gpt-small  configs/gpt-small.toml on the GPU in bfloat16, beside the same peers
  gpt-long   the longest sequence (doubling from 8192) of configs/gpt-long.toml that trains two
             steps on the GPU, loom's fused attention against PyTorch eager with SDPA

loom's line also gives its GPU peak over the plan's memory estimate (`loom config --json`).
loom's tokens/s is the median step after the first two (warm-up: libtorch's CUDA start, cuBLAS
plans); the peers time steps after their warm-up steps (torch.compile compiles in them). MFU is
model FLOPs over the measured bf16 peak: loom reports it (--peak-flops), and a peer's is loom's
times the peer's tokens/s over loom's (the same model FLOPs per token). Each run has a time limit;
one that fails or runs out of time is reported as such, with the tail of its output, never dropped.
The whole run stops starting new runs past --budget-s.

  bench/gpu.py --loom build-device/bin/loom --out DIR [--budget-s 300]

Writes DIR/gpu-bench.json and prints a table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "bench", "torch_reference.py")

# The peers' shapes for each loom config, as torch_reference.py names them.
WORKLOADS = {
    "llama-1b": ["--model", "llama", "--vocab", "65536", "--d-model", "2048", "--layers", "16", "--heads", "16",
                 "--kv-heads", "8", "--seq", "4096", "--ffn-mult", "4", "--multiple-of", "256",
                 "--rope-theta", "500000", "--micro-batch", "1", "--micro-batches", "8"],
    "gpt-small": ["--model", "gpt", "--vocab", "8192", "--d-model", "512", "--layers", "8", "--heads", "8",
                  "--seq", "512", "--ffn-mult", "4", "--micro-batch", "2", "--micro-batches", "8"],
}


class Clock:
    def __init__(self, budget_s):
        self.end = time.monotonic() + budget_s

    def left(self):
        return self.end - time.monotonic()


def run(cmd, timeout, clock):
    """(exit code, stdout, stderr); 124 past the timeout, -1 when the budget is spent."""
    limit = min(timeout, clock.left())
    if limit < 10:
        return -1, "", "not started: the benchmark's time budget is spent"
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=ROOT)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", f"timed out after {limit:.0f} s"


def tail(text, n=3):
    return " | ".join(line for line in (text or "").strip().splitlines()[-n:])


def peak(loom, dtype, clock):
    rc, out, err = run([loom, "bench", "gemm", "--device", "cuda", "--dtype", dtype, "--seconds", "0.3"], 120, clock)
    if rc != 0:
        return {"ok": False, "why": tail(err)}
    return {"ok": True, "flops_per_s": json.loads(out.strip().splitlines()[-1])["peak_flops_per_s"]}


def loom_train(loom, config, sets, peak_flops, clock, timeout=240):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = [loom, "train", "-c", config, "--set", "train.device=cuda", "--peak-flops", str(peak_flops),
               "--quiet", "--metrics", metrics]
        for s in sets:
            cmd += ["--set", s]
        rc, _, err = run(cmd, timeout, clock)
        lines = []
        if os.path.exists(metrics):
            with open(metrics) as f:
                lines = [json.loads(line) for line in f if line.strip()]
    steps = [m for m in lines if "step_ms" in m and m.get("step", 0) > 2]
    if rc != 0 or not steps:
        return {"ok": False, "why": tail(err) or "no timed steps"}
    # The plan's memory estimate for the rank (NOTE [Run plan]) beside the GPU's measured peak.
    plan_cmd = [loom, "config", "--json", "-c", config, "--set", "train.device=cuda"]
    for s in sets:
        plan_cmd += ["--set", s]
    rc, out, _ = run(plan_cmd, 60, clock)
    estimate = json.loads(out)["stages"][0]["memory"]["total"] if rc == 0 else None
    ms = statistics.median(m["step_ms"] for m in steps)
    tps = statistics.median(m["tokens_per_s"] for m in steps)
    mfu = statistics.median(m["mfu"] for m in steps)
    peak = max(m.get("peak_bytes", 0) for m in steps)
    return {"ok": True, "step_ms": ms, "tokens_per_s": tps, "mfu": mfu, "peak_bytes": peak,
            "plan_estimate_bytes": estimate, "peak_over_estimate": peak / estimate if estimate else None}


def peer(shape, extra, clock, timeout=300):
    cmd = [sys.executable, REFERENCE, "--device", "cuda", "--dtype", "bfloat16", "--steps", "5",
           "--warmup-steps", "3"] + shape + extra
    rc, out, err = run(cmd, timeout, clock)
    if rc != 0:
        return {"ok": False, "why": tail(err)}
    line = json.loads(out.strip().splitlines()[-1])
    return {"ok": True, "step_ms": line["step_ms"], "tokens_per_s": line["tokens_per_s"],
            "peak_bytes": line.get("gpu_peak_bytes", 0)}


def workload(loom, name, peak_flops, clock):
    config = os.path.join(ROOT, "configs", name + ".toml")
    sets = [] if name == "llama-1b" else ["model.dtype=bfloat16", "train.steps=10"]
    out = {"loom": loom_train(loom, config, sets, peak_flops, clock),
           "eager": peer(WORKLOADS[name], [], clock),
           "compile": peer(WORKLOADS[name], ["--compile"], clock)}
    lm = out["loom"]
    for key in ("eager", "compile"):
        p = out[key]
        if lm["ok"] and p["ok"]:
            p["mfu"] = lm["mfu"] * p["tokens_per_s"] / lm["tokens_per_s"]
            out["loom_over_" + key] = lm["tokens_per_s"] / p["tokens_per_s"]
    return out


def longest(cmd_of, clock, start=8192, limit=1 << 20):
    """The longest sequence, doubling from `start`, whose run succeeds; and why the next one failed."""
    best, why, seq = None, "", start
    while seq <= limit:
        rc, _, err = run(cmd_of(seq), 180, clock)
        if rc != 0:
            why = f"seq {seq}: " + (tail(err, 1) or f"exit {rc}")
            break
        best, seq = seq, seq * 2
    return {"longest_seq": best, "stopped": why}


def gpt_long(loom, clock):
    config = os.path.join(ROOT, "configs", "gpt-long.toml")

    def loom_cmd(seq):
        return [loom, "train", "-c", config, "--set", "train.device=cuda", "--set", f"model.seq_len={seq}",
                "--set", f"model.max_positions={max(seq, 65536)}", "--set", "train.steps=2",
                "--set", "model.dtype=bfloat16", "--peak-flops", "1e15", "--quiet"]

    def peer_cmd(seq):
        return [sys.executable, REFERENCE, "--device", "cuda", "--dtype", "bfloat16", "--model", "gpt",
                "--vocab", "4096", "--d-model", "256", "--layers", "2", "--heads", "4", "--seq", str(seq),
                "--micro-batch", "1", "--micro-batches", "1", "--steps", "1", "--warmup-steps", "1"]

    return {"loom": longest(loom_cmd, clock), "pytorch_sdpa": longest(peer_cmd, clock)}


def table(r):
    lines = [f"bf16 GEMM peak {r['peak']['bfloat16'].get('flops_per_s', 0) / 1e12:.1f} TFLOP/s, "
             f"float32 {r['peak']['float32'].get('flops_per_s', 0) / 1e12:.1f}"]
    lines.append(f"{'workload':<10} {'run':<8} {'tokens/s':>10} {'step ms':>9} {'MFU':>6} {'GPU GiB':>8}  note")
    for name in WORKLOADS:
        w = r.get(name, {})
        for key in ("loom", "eager", "compile"):
            m = w.get(key, {"ok": False, "why": "not run"})
            if not m["ok"]:
                lines.append(f"{name:<10} {key:<8} {'-':>10} {'-':>9} {'-':>6} {'-':>8}  {m['why']}")
                continue
            ratio = w.get("loom_over_" + key)
            note = f"loom is {ratio:.2f}x" if ratio else ""
            if m.get("peak_over_estimate"):
                note = f"peak / plan's estimate {m['peak_over_estimate']:.2f}"
            lines.append(f"{name:<10} {key:<8} {m['tokens_per_s']:>10.0f} {m['step_ms']:>9.1f} "
                         f"{m.get('mfu', 0):>6.3f} {m.get('peak_bytes', 0) / 2**30:>8.2f}  {note}")
    for who, m in r.get("gpt-long", {}).items():
        lines.append(f"gpt-long   {who:<12} longest seq {m['longest_seq']}  ({m['stopped'] or 'reached the limit'})")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loom", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=300)
    a = p.parse_args()
    clock = Clock(a.budget_s)
    r = {"peak": {d: peak(a.loom, d, clock) for d in ("bfloat16", "float32")}}
    bf16 = r["peak"]["bfloat16"].get("flops_per_s") or 1e15  # MFU is meaningless without it: said in the table
    for name in WORKLOADS:
        r[name] = workload(a.loom, name, bf16, clock)
    r["gpt-long"] = gpt_long(a.loom, clock)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gpu-bench.json"), "w") as f:
        json.dump(r, f, indent=1)
    print(table(r))


if __name__ == "__main__":
    main()

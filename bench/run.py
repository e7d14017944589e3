#!/usr/bin/env python3
"""Runs loom and its peer on the workloads of BENCHMARKS.md and prints one JSON line per run.

loom and the PyTorch eager reference alternate for BENCH_ROUNDS rounds, so both see the same
machine conditions; each reports the median step time over its timed steps (the first steps of
every run are warm-up and not timed). The ratio is loom's tokens/s over the peer's.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOM = os.path.join(ROOT, "build", "bin", "loom")
WARMUP = 2


def effective_config(workload):
    path = os.path.join(ROOT, "configs", f"{workload}.toml")
    if not os.path.exists(path):
        sys.exit(f"loom: error: unknown workload '{workload}' (no {path})")
    out = subprocess.run([LOOM, "config", "--print", "-c", path], check=True, capture_output=True, text=True)
    return path, tomllib.loads(out.stdout)


def gemm_peak(threads):
    out = subprocess.run([LOOM, "bench", "gemm", "--threads", str(threads), "--sizes", "512", "1024",
                          "--seconds", "0.5"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["peak_flops_per_s"]


def run_loom(path, steps, threads, peak):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        subprocess.run([LOOM, "train", "-c", path, "--quiet", "--metrics", metrics,
                        "--peak-flops", str(peak), "--set", f"train.steps={steps + WARMUP}",
                        "--set", f"train.threads={threads}"], check=True)
        with open(metrics) as f:
            return [json.loads(line) for line in f]


def run_peer(cfg, steps, threads):
    m, t = cfg["model"], cfg["train"]
    args = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_reference.py"),
            "--vocab", m["vocab"], "--d-model", m["d_model"], "--layers", m["n_layers"],
            "--heads", m["n_heads"], "--seq", m["seq_len"], "--ffn-mult", m["ffn_mult"],
            "--micro-batch", t["micro_batch"], "--micro-batches", t["global_batch"] // t["micro_batch"],
            "--steps", steps, "--warmup-steps", WARMUP, "--threads", threads, "--dtype", m["dtype"],
            "--lr", t["lr"]]
    out = subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(workload, steps, rounds, threads, peak):
    path, cfg = effective_config(workload)
    p, m, t = cfg["parallel"], cfg["model"], cfg["train"]
    tokens_per_step = t["global_batch"] * m["seq_len"]
    loom_ms, peer_ms, records = [], [], []
    for _ in range(rounds):
        run = run_loom(path, steps, threads, peak)
        records.append(run)
        loom_ms += [r["step_ms"] for r in run[WARMUP:]]
        peer = run_peer(cfg, steps, threads)
        peer_ms.append(peer["step_ms"])
    step_ms = statistics.median(loom_ms)
    peer_step_ms = statistics.median(peer_ms)
    first = records[0]
    mfu = statistics.median(r["mfu"] for run in records for r in run[WARMUP:])
    return {
        "workload": workload,
        "layout": {"dp": p["dp"], "tp": p["tp"], "pp": p["pp"], "sp": p["sp"], "schedule": None, "sp_mode": None},
        "threads": threads,
        "steps": steps * rounds,
        "tokens_per_s": tokens_per_step / (step_ms / 1e3),
        "step_ms": step_ms,
        "step_ms_spread": [min(loom_ms), max(loom_ms)],
        "mfu": mfu,
        "gemm_peak_flops_per_s": peak,
        "peak_bytes": max(r["peak_bytes"] for run in records for r in run),
        "comm_bytes_per_step": {},
        "bubble_fraction": None,
        "loss_first": first[0]["loss"],
        "loss_last": first[-1]["loss"],
        "peer": {"impl": "pytorch-eager", "torch": peer["torch"], "step_ms": peer_step_ms,
                 "tokens_per_s": tokens_per_step / (peer_step_ms / 1e3)},
        "ratio_vs_peer": peer_step_ms / step_ms,
    }


def main():
    workloads = sys.argv[1:] or ["gpt-tiny"]
    steps = int(os.environ.get("BENCH_STEPS", "8"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    threads = int(os.environ.get("THREADS", str(os.cpu_count() or 1)))
    peak = gemm_peak(threads)
    for workload in workloads:
        print(json.dumps(bench(workload, steps, rounds, threads, peak)), flush=True)


if __name__ == "__main__":
    main()

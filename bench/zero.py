#!/usr/bin/env python3
"""ZeRO-2/3 figures (issue 37; NOTE [Fully sharded data parallelism]). One JSON line per part:

`memory`: gpt-small (float32) at dp = 4 under parallel.zero = 0, 1, 2, 3, one thread per rank: each
rank's state between steps (state_bytes: parameters, the gradients it keeps, moments, measured after
the update), the working set beside it (working_bytes: gathered values and gradients not yet
reduced, at most at once), their sum (the peak of parameters + gradients + moments), its peak over
the step (peak_bytes: all that and the activations), and the plan's estimate of that peak; the
ratios of ZeRO-3's and ZeRO-2's against ZeRO-0's and ZeRO-1's.

`largest`: the largest gpt (d_model 1024, n_layers searched, seq 128, micro-batch 1) whose plan fits
a 2 GiB budget per rank at dp = 4 under zero = 1 and zero = 3, each verified by a real run of 2 steps
under that budget (the accounting allocator refuses what the budget does not hold); the ratio of
their parameter counts.

`speed`: gpt-small at dp = 2, zero = 3 against zero = 1, alternating for BENCH_ROUNDS rounds in the
same run: the median step time of each and zero = 1's over zero = 3's (tokens/s of 3 over 1).

Four ranks on this machine's 2 cores are oversubscribed: `memory` and `largest` measure bytes, which
that does not change; `speed` runs 2 ranks, one per core.
"""
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the workloads' helpers)

SMALL = os.path.join(run.ROOT, "configs", "gpt-small.toml")


def train(path, ranks, sets, steps):
    """(records, stderr) of a `loom train` on `ranks` ranks; records is empty when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        rc, _, err, _ = run.run_locked(run.mpirun(ranks) + [run.LOOM, "train", "-c", path, "--quiet", "--metrics",
                                                            metrics, "--peak-flops", "1e11"]
                                       + run.set_args(sets + [f"train.steps={steps}", "train.threads=1",
                                                              "train.warmup=0"]))
        records = []
        if rc == 0 and os.path.exists(metrics):
            with open(metrics) as f:
                records = [json.loads(line) for line in f]
        return records, err


def memory():
    out = {"part": "memory", "model": "gpt-small", "dp": 4}
    for zero in (0, 1, 2, 3):
        sets = ["parallel.dp=4", f"parallel.zero={zero}", "train.global_batch=8", "train.micro_batch=1"]
        plan, refusal = run.memory_plan(run.LOOM, SMALL, sets)
        records, err = train(SMALL, 4, sets, 2)
        if not records:
            sys.exit(f"loom: error: zero = {zero} did not run: {run.error_lines(err)}")
        last = records[-1]
        stage = plan["stages"][0]["memory"] if plan else {}
        out[f"zero{zero}"] = {"state_bytes": last["state_bytes"], "working_bytes": last["working_bytes"],
                              "state_and_working_bytes": last["state_bytes"] + last["working_bytes"],
                              "peak_bytes": last["peak_bytes"],
                              "predicted_peak_bytes": stage.get("total"),
                              "predicted_state_bytes": stage.get("weights"),
                              "predicted_gathered_bytes": stage.get("gathered"),
                              "peak_predicted_over_measured": stage.get("total", 0) / last["peak_bytes"],
                              "loss_last": last["loss"]}
    z = out
    for stage in (2, 3):
        for base in (0, 1):
            z[f"state_zero{stage}_over_zero{base}"] = z[f"zero{stage}"]["state_bytes"] / z[f"zero{base}"]["state_bytes"]
            z[f"state_and_working_zero{stage}_over_zero{base}"] = (z[f"zero{stage}"]["state_and_working_bytes"]
                                                                   / z[f"zero{base}"]["state_and_working_bytes"])
            z[f"peak_zero{stage}_over_zero{base}"] = z[f"zero{stage}"]["peak_bytes"] / z[f"zero{base}"]["peak_bytes"]
    print(json.dumps(out), flush=True)


def fits(zero, layers, budget):
    sets = ["model.d_model=1024", "model.n_heads=16", f"model.n_layers={layers}", "model.seq_len=128",
            "model.vocab=8192", "parallel.dp=4", f"parallel.zero={zero}", "train.global_batch=4",
            "train.micro_batch=1", f"memory.budget={budget}"]
    plan, refusal = run.memory_plan(run.LOOM, SMALL, sets)
    return sets, plan, refusal


def largest():
    budget = "2GiB"
    out = {"part": "largest", "budget": budget, "dp": 4}
    for zero in (1, 3):
        lo, hi = 0, 512  # the plan fits lo layers and not hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(zero, mid, budget)[1] else (lo, mid)
        sets, plan, _ = fits(zero, lo, budget)
        records, err = train(SMALL, 4, sets, 2)
        params = 12 * 1024 * 1024 * lo + 2 * 8192 * 1024 + 128 * 1024  # blocks, table and head, positions
        out[f"zero{zero}"] = {"n_layers": lo, "approx_params": params, "verified": bool(records),
                              "error": None if records else run.error_lines(err),
                              "peak_bytes": records[-1]["peak_bytes"] if records else None,
                              "predicted_peak_bytes": plan["stages"][0]["memory"]["total"]}
    out["params_zero3_over_zero1"] = out["zero3"]["approx_params"] / out["zero1"]["approx_params"]
    print(json.dumps(out), flush=True)


def speed():
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    steps = int(os.environ.get("BENCH_STEPS", "6"))
    times = {1: [], 3: []}
    losses = {}  # the last step's, float32: the two sum in different orders, so close, not equal
    for _ in range(rounds):
        for zero in (1, 3):
            records, err = train(SMALL, 2, ["parallel.dp=2", f"parallel.zero={zero}"], steps + run.WARMUP)
            if not records:
                sys.exit(f"loom: error: zero = {zero} did not run: {run.error_lines(err)}")
            times[zero].append(statistics.median(r["step_ms"] for r in records[run.WARMUP:]))
            losses[zero] = records[-1]["loss"]
    one, three = statistics.median(times[1]), statistics.median(times[3])
    print(json.dumps({"part": "speed", "model": "gpt-small", "dp": 2, "rounds": rounds, "step_ms_zero1": one,
                      "step_ms_zero3": three, "zero3_speed_over_zero1": one / three, "each_zero1": times[1],
                      "each_zero3": times[3],
                      "last_loss_relative_difference": abs(losses[3] - losses[1]) / abs(losses[1])}), flush=True)


if __name__ == "__main__":
    parts = {"memory": memory, "largest": largest, "speed": speed}
    for name in sys.argv[1:] or list(parts):
        if name not in parts:
            sys.exit(f"loom: error: unknown part '{name}'; hint: one of {', '.join(parts)}")
        parts[name]()

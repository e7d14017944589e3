#!/usr/bin/env python3
"""ZeRO-2/3 figures (issue 37; NOTE [Fully sharded data parallelism]). One JSON line per part:

`memory`: gpt-small (float32) at dp = 4 under parallel.zero = 0, 1, 2, 3, one thread per rank: each
rank's state between steps (state_bytes: everything live after the update), the part of it in
parameters, gradients and moments (model_state_bytes, counted from the optimizer's tensors; the
rest, beside_model_bytes, should be the same in every mode), the working set beside it
(working_bytes: gathered values and gradients not yet reduced, at most at once), the peak of
parameters + gradients + moments (model_peak_bytes: model state + working set), the step's peak
(peak_bytes: all that and the activations), and the plan's estimate of that peak; the ratios of
ZeRO-3's and ZeRO-2's against ZeRO-0's and ZeRO-1's.

`largest`: the largest gpt (d_model 1024, n_layers searched, seq 128, micro-batch 1) whose plan fits
a 2 GiB budget per rank at dp = 4 under zero = 1 and zero = 3, each verified by a real run of 2 steps
under that budget (the accounting allocator refuses what the budget does not hold); the ratio of
their parameter counts; in float32 and in bfloat16 (BENCH_DTYPES).

`speed`: gpt-small at dp = 2, zero = 3 against zero = 1, alternating for BENCH_ROUNDS rounds in the
same run: the median step time of each and zero = 1's over zero = 3's (tokens/s of 3 over 1).

`overlap`: gpt-tiny at dp = 2 under zero = 3, traced: how many gathers overlap a layer's pass, and
what share of their time lies under passes.

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
                              "model_state_bytes": last["model_state_bytes"],
                              "model_peak_bytes": last["model_state_bytes"] + last["working_bytes"],
                              "beside_model_bytes": last["state_bytes"] - last["model_state_bytes"],
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
            # The figure: the peak of parameters + gradients + moments (the working set
            # included), the run's other bytes left out of both.
            z[f"model_peak_zero{stage}_over_zero{base}"] = (z[f"zero{stage}"]["model_peak_bytes"]
                                                            / z[f"zero{base}"]["model_peak_bytes"])
    print(json.dumps(out), flush=True)


def fits(zero, layers, budget, dtype):
    sets = ["model.d_model=1024", "model.n_heads=16", f"model.n_layers={layers}", "model.seq_len=128",
            "model.vocab=8192", f"model.dtype={dtype}", "parallel.dp=4", f"parallel.zero={zero}",
            "train.global_batch=4", "train.micro_batch=1", f"memory.budget={budget}"]
    plan, refusal = run.memory_plan(run.LOOM, SMALL, sets)
    return sets, plan, refusal


def largest():
    """In float32 (masters, products and gradients) and in bfloat16 (float32 masters and moments,
    bfloat16 products: ZeRO-1 keeps a bfloat16 copy of every parameter beside its master)."""
    budget = "2GiB"
    for dtype in os.environ.get("BENCH_DTYPES", "float32,bfloat16").split(","):
        out = {"part": "largest", "budget": budget, "dp": 4, "dtype": dtype}
        for zero in (1, 3):
            lo, hi = 0, 512  # the plan fits lo layers and not hi
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if fits(zero, mid, budget, dtype)[1] else (lo, mid)
            sets, plan, _ = fits(zero, lo, budget, dtype)
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


def overlap():
    """How much of ZeRO-3's gathering lies under compute: gpt-tiny at dp = 2, 2 steps with --trace;
    per rank, the gathers (category "zero", from issue to completion as the rank saw them) that
    overlap a layer's pass on the rank's compute track, and the share of gather time under passes."""
    tiny = os.path.join(run.ROOT, "configs", "gpt-tiny.toml")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        rc, _, err, _ = run.run_locked(run.mpirun(2) + [run.LOOM, "train", "-c", tiny, "--quiet", "--trace", trace,
                                                        "--peak-flops", "1e11"]
                                       + run.set_args(["parallel.dp=2", "parallel.zero=3", "train.steps=2",
                                                       "train.threads=1", "train.warmup=0"]))
        if rc != 0:
            sys.exit(f"loom: error: the traced run failed: {run.error_lines(err)}")
        with open(trace) as f:
            data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = [e for e in events if e.get("ph") == "X"]
    out = {"part": "overlap", "model": "gpt-tiny", "dp": 2, "zero": 3, "ranks": {}}
    for rank in sorted({e["pid"] for e in spans}):
        mine = [e for e in spans if e["pid"] == rank]
        gathers = [e for e in mine if e.get("cat") == "zero" and e["name"].startswith("gather")]
        passes = [e for e in mine if e.get("cat") in ("forward", "backward_input", "backward_weight", "recompute")]
        covered, under, total = 0, 0.0, 0.0
        for g in gathers:
            a, b = g["ts"], g["ts"] + g["dur"]
            cuts = sorted((max(a, p["ts"]), min(b, p["ts"] + p["dur"])) for p in passes
                          if p["ts"] < b and p["ts"] + p["dur"] > a)
            covered += bool(cuts)
            end = a
            for lo, hi in cuts:  # the union of the passes' overlaps
                lo = max(lo, end)
                if hi > lo:
                    under += hi - lo
                    end = hi
            total += g["dur"]
        out["ranks"][rank] = {"gathers": len(gathers), "overlapping_a_pass": covered,
                              "time_under_passes": under / total if total else None}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    parts = {"memory": memory, "largest": largest, "speed": speed, "overlap": overlap}
    for name in sys.argv[1:] or list(parts):
        if name not in parts:
            sys.exit(f"loom: error: unknown part '{name}'; hint: one of {', '.join(parts)}")
        parts[name]()

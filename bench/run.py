#!/usr/bin/env python3
"""Runs loom and its peer on the workloads of docs/workloads.md and prints one JSON line per run.

A workload is a config name with an optional layout: `gpt-tiny` (one rank, peer: PyTorch eager;
for a Llama config such as `llama-small` the peer is torch_reference.py --model llama of the same shapes),
`gpt-tiny@dp2` (two MPI ranks, peer: PyTorch DistributedDataParallel over gloo), `gpt-small@tp2`
(two ranks in tensor parallelism, peer: PyTorch eager in one process with the same total
threads); a layout may add `+overlapK` (parallel.tp_overlap = K) and `+seq` (parallel.tp_sequence),
e.g. `gpt-small@tp2+overlap2+seq`. The thread count is the same in all. loom and its peer alternate for BENCH_ROUNDS rounds, so both see the
same machine conditions; each reports the median step time over its timed steps (the first
steps of every run are warm-up and not timed). The ratio is loom's tokens/s over the peer's.
`versus:NAME[@layout]` runs this build's loom against another binary (BENCH_BEFORE=PATH, e.g. built at
an earlier commit) on NAME, alternating in every round: the ratio is this build's tokens/s over the other's.
`allreduce` runs the communicator's all-reduce against a raw MPI_Allreduce loop on 2 ranks.
`hosts` runs on 2 hosts x 2 ranks of the test cluster (root; bench/hosts.py): the flat ring all-reduce against
the hierarchical one, and gpt-small's layouts measured against `loom simulate` and `loom plan` on the cluster
file `loom profile --cluster-out` writes across the hosts.
`gpt-long` (or `long-sequences`) sweeps gpt-long's peak memory per rank over sequence lengths, sp and sp_mode.
`pipelines` runs gpt-small at pp = 2 and 4 (BENCH_PP) under every schedule (BENCH_SCHEDULES) and reports the measured bubble beside
the simulator's prediction for the same action times. `tp-overlap` and `tp-sequence` compare loom with itself on gpt-small at tp=2: tp_overlap 1 against 2,
and tp_sequence off against on, alternating the two in every round; the peer is the option off.
`dlrm-sparse` and `gpt-bigvocab` compare the sparse tables' hybrid exchange with dense all-reduce
at dp = 2 and 4 (bytes per step, step time), and loom's chosen partition count with the measured best.
`sparse-choice` runs parallel.sparse = auto beside forced on and off for gpt-tiny@dp2,
gpt-bigvocab@dp2 and dlrm-sparse@dp2/@dp4 (`sparse-choice:NAME@dpN` for one), with auto's step
time over the better forced one.
`checkpoint` saves gpt-small (weights and AdamW moments, float32) on one rank and reports the save's
bandwidth over this machine's sequential write bandwidth measured by dd (with fsync) into the same
directory in the same run, how much of the save an async save hides behind training steps
(1 - its exposed time over the synchronous save's: the time a save holds the run plus the slowdown
of the step after it), and the load time of a resume.
`NAME-bf16` (e.g. `gpt-small-bf16`, `llama-small-bf16@dp2`) runs configs/NAME.toml four ways, alternating
in every round: loom with model.dtype = bfloat16, loom float32, PyTorch with torch.autocast("cpu",
dtype=torch.bfloat16) over float32 weights, PyTorch float32 (DDP over gloo at dpN); it prints loom bf16 /
loom fp32 and loom bf16 / PyTorch autocast, and "unsupported" for a loom run this build refuses.
`memory` (issue 16; `memory:NAME` for pp = 2 and 4, `memory:NAME@ppN` for one) fixes a per-rank budget
(plain 1F1B's largest stage at micro-batch 1, plus 10%) and finds, per memory policy (GPipe, 1F1B with
no, full, stage-aware recomputation or swap = all, and memory.policy = auto with parallel.partition =
auto), the largest micro-batch `loom config` accepts under it, verified by a real run; then auto's step
time against every manual recompute x swap x partition combination that fits at auto's batch, the
plan's predicted peak per stage and step time against the measured ones, and swap = all against keep
at micro-batch 1. It runs gpt-small at pp = 2 and 4 and llama-small at pp = 2 (33 minutes on 2
cores), one thread per rank, with a `loom profile` of the same micro-batch where one is used, and a
private copy of build/bin/loom. BENCH_LOCK=FILE holds flock(FILE) around each profile and train run, so
that builds sharing the machine take turns with the timings.
"""
import fcntl
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOM = os.path.join(ROOT, "build", "bin", "loom")
WARMUP = 2


def effective_config(workload, sets=()):
    """configs/WORKLOAD.toml's path and the config loom runs from it, with `--set`s applied."""
    path = os.path.join(ROOT, "configs", f"{workload}.toml")
    if not os.path.exists(path):
        sys.exit(f"loom: error: unknown workload '{workload}' (no {path})")
    out = subprocess.run([LOOM, "config", "--print", "-c", path] + [a for x in sets for a in ("--set", x)],
                         check=True, capture_output=True, text=True)
    return path, tomllib.loads(out.stdout)


def gemm_peak(threads):
    out = subprocess.run([LOOM, "bench", "gemm", "--threads", str(threads), "--sizes", "512", "1024",
                          "--seconds", "0.5"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["peak_flops_per_s"]


def gemm_peak_bf16(threads):
    """The bfloat16 GEMM peak, or None where this build's `loom bench gemm` has no --dtype bfloat16."""
    out = subprocess.run([LOOM, "bench", "gemm", "--threads", str(threads), "--sizes", "512", "1024",
                          "--seconds", "0.5", "--dtype", "bfloat16"], capture_output=True, text=True)
    return json.loads(out.stdout)["peak_flops_per_s"] if out.returncode == 0 else None


def mpirun(ranks):
    return [os.path.join(ROOT, "scripts", "mpirun.sh"), str(ranks), "-x", "OMP_NUM_THREADS"]


# Pipeline schedules as layout parts: the interleaved one with two chunks per rank, the shifted
# critical path with Merak's stage-aware recomputation (first stage 0.5).
SCHEDULES = {
    "gpipe": ["parallel.schedule=gpipe"],
    "1f1b": ["parallel.schedule=1f1b"],
    "interleaved": ["parallel.schedule=interleaved", "parallel.chunks=2"],
    "zb-h1": ["parallel.schedule=zb-h1"],
    "scp": ["parallel.schedule=scp", "memory.recompute=stage-aware", "memory.recompute_ratio=0.5"],
    "zb-v": ["parallel.schedule=zb-v"],
    "dualpipe-v": ["parallel.schedule=dualpipe-v"],
}


def parse_layout(layout):
    """'tp2+overlap2+seq' -> ({'tp': 2}, ['parallel.tp_overlap=2', 'parallel.tp_sequence=true']); '' -> ({}, [])."""
    degrees, options = {}, []
    for part in filter(None, layout.split("+")):
        if part[:2] in ("dp", "tp") and part[2:].isdigit():
            degrees[part[:2]] = int(part[2:])
        elif part.startswith("overlap") and part[7:].isdigit():
            options.append(f"parallel.tp_overlap={part[7:]}")
        elif part[:2] == "pp" and part[2:].isdigit():
            degrees["pp"] = int(part[2:])
        elif part == "seq":
            options.append("parallel.tp_sequence=true")
        elif part in SCHEDULES:
            options += SCHEDULES[part]
        else:
            sys.exit(f"loom: error: unknown layout part '{part}' in '{layout}'; "
                     "hint: dpN, tpN, ppN, overlapK, seq or a schedule joined by '+'")
    return degrees, options


def run_measured(args, env=None):
    """Runs args to the end; returns (stdout, its peak resident bytes: ru_maxrss of that child alone)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args)
    return out, usage.ru_maxrss * 1024


def run_loom(path, steps, threads, peak, degrees, options=(), loom=None, rss=None):
    """loom's metrics records of one run (`loom` another binary than this build's; `rss` a list that
    gets the run's peak resident bytes, one rank's, where it runs in one process)."""
    ranks = degrees.get("dp", 1) * degrees.get("tp", 1) * degrees.get("pp", 1)
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        launch = mpirun(ranks) if ranks > 1 else []
        sets = [f"parallel.{axis}={degree}" for axis, degree in degrees.items()] + list(options)
        sets += [f"train.steps={steps + WARMUP}", f"train.threads={max(1, threads // ranks)}"]
        peak_args = ["--peak-flops", str(peak)] if peak else []  # None: loom measures its own
        _, peak_rss = run_measured(launch + [loom or LOOM, "train", "-c", path, "--quiet", "--metrics", metrics]
                                   + peak_args + [a for s in sets for a in ("--set", s)])
        if rss is not None and ranks == 1:
            rss.append(peak_rss)
        with open(metrics) as f:
            return [json.loads(line) for line in f]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(cfg, steps, threads, dp, extra=()):
    """torch_reference.py's JSON line for cfg, in this interpreter (bench/run.sh starts run.py in the
    PyTorch whose libtorch loom links); extra: more of its flags (--compile, --attention explicit)."""
    m, t = cfg["model"], cfg["train"]
    args = [sys.executable, os.path.join(ROOT, "bench", "torch_reference.py"),
            "--vocab", m["vocab"], "--d-model", m["d_model"], "--layers", m["n_layers"],
            "--heads", m["n_heads"], "--seq", m["seq_len"], "--ffn-mult", m["ffn_mult"],
            "--micro-batch", t["micro_batch"], "--micro-batches", t["global_batch"] // t["micro_batch"],
            "--steps", steps, "--warmup-steps", WARMUP, "--threads", max(1, threads // dp),
            "--dtype", m["dtype"], "--lr", t["lr"]]
    if m["kind"] == "llama":  # PyTorch's Llama of the same shapes
        args += ["--model", "llama", "--kv-heads", m["n_kv_heads"] or m["n_heads"], "--multiple-of", m["ffn_multiple_of"],
                 "--rope-theta", m["rope_theta"]] + (["--tie-embeddings"] if m["tie_embeddings"] else [])
    args = [str(a) for a in list(args) + list(extra)]
    if dp == 1:
        out, rss = run_measured(args)
        return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_bytes": rss}
    env = dict(os.environ, WORLD_SIZE=str(dp), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [subprocess.Popen(args, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True)
             for r in range(dp)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("loom: error: the PyTorch DDP reference failed")
    return json.loads(outs[0].strip().splitlines()[-1])


def bench(workload, steps, rounds, threads, peak):
    name, _, layout = workload.partition("@")
    degrees, options = parse_layout(layout)
    options.append("parallel.sparse=off")  # the peer's token table is dense (dense AdamW): the same math
    dp, tp = degrees.get("dp", 1), degrees.get("tp", 1)
    path, cfg = effective_config(name)
    p, m, t = cfg["parallel"], cfg["model"], cfg["train"]
    tokens_per_step = t["global_batch"] * m["seq_len"]
    loom_ms, peer_ms, records = [], [], []
    for _ in range(rounds):
        run = run_loom(path, steps, threads, peak, degrees, options)
        records.append(run)
        loom_ms += [r["step_ms"] for r in run[WARMUP:]]
        peer = run_peer(cfg, steps, threads, dp)
        peer_ms.append(peer["step_ms"])
    step_ms = statistics.median(loom_ms)
    peer_step_ms = statistics.median(peer_ms)
    first = records[0]
    mfu = statistics.median(r["mfu"] for run in records for r in run[WARMUP:])
    return {
        "workload": workload,
        "layout": {"dp": dp, "tp": tp, "pp": p["pp"], "sp": p["sp"], "schedule": None, "sp_mode": None,
                   "options": options},
        "threads": threads,
        "steps": steps * rounds,
        "tokens_per_s": tokens_per_step / (step_ms / 1e3),
        "step_ms": step_ms,
        "step_ms_spread": [min(loom_ms), max(loom_ms)],
        "mfu": mfu,
        "gemm_peak_flops_per_s": peak,
        "peak_bytes": max(r["peak_bytes"] for run in records for r in run),
        "comm_bytes_per_step": first[-1].get("comm_bytes_per_step", {}),
        "bubble_fraction": None,
        "loss_first": first[0]["loss"],
        "loss_last": first[-1]["loss"],
        "peer": {"impl": peer["impl"], "torch": peer["torch"], "step_ms": peer_step_ms,
                 "tokens_per_s": tokens_per_step / (peer_step_ms / 1e3)},
        "ratio_vs_peer": peer_step_ms / step_ms,
    }


# Self-comparisons: (config, degrees, the option off, the option on).
VARIANTS = {
    "tp-overlap": ("gpt-small", {"tp": 2}, ["parallel.tp_overlap=1"], ["parallel.tp_overlap=2"]),
    "tp-sequence": ("gpt-small", {"tp": 2}, ["parallel.tp_sequence=false"], ["parallel.tp_sequence=true"]),
}


def compare(workload, steps, rounds, threads, peak):
    name, degrees, off, on = VARIANTS[workload]
    path, cfg = effective_config(name)
    tokens_per_step = cfg["train"]["global_batch"] * cfg["model"]["seq_len"]
    ms = {"off": [], "on": []}
    runs = {"off": [], "on": []}
    for _ in range(rounds):
        for key, options in (("off", off), ("on", on)):
            run = run_loom(path, steps, threads, peak, degrees, options)
            runs[key].append(run)
            ms[key] += [r["step_ms"] for r in run[WARMUP:]]

    def summary(key, options):
        first = runs[key][0]
        step_ms = statistics.median(ms[key])
        return {"options": options, "step_ms": step_ms, "step_ms_spread": [min(ms[key]), max(ms[key])],
                "tokens_per_s": tokens_per_step / (step_ms / 1e3),
                "peak_bytes": max(r["peak_bytes"] for run in runs[key] for r in run),
                "comm_bytes_per_step": first[-1].get("comm_bytes_per_step", {}),
                "losses": [r["loss"] for r in first]}

    base, variant = summary("off", off), summary("on", on)
    return {"workload": workload, "config": name, "layout": degrees, "threads": threads, "steps": steps * rounds,
            "off": base, "on": variant,
            "same_losses": base["losses"] == variant["losses"],
            "ratio_on_vs_off": base["step_ms"] / variant["step_ms"],
            "peak_bytes_on_vs_off": variant["peak_bytes"] / base["peak_bytes"]}


def versus(workload, steps, rounds, threads, peak):
    """`versus:NAME[@layout]`: this build's loom against another loom binary (BENCH_BEFORE, e.g. one
    built at an earlier commit) on the same workload, alternating in every round; the ratio is this
    build's tokens/s over the other's, and the losses of the two first runs side by side."""
    other = os.environ["BENCH_BEFORE"]
    name, _, layout = workload.partition(":")[2].partition("@")
    degrees, options = parse_layout(layout)
    options.append("parallel.sparse=off")
    path, cfg = effective_config(name)
    tokens_per_step = cfg["train"]["global_batch"] * cfg["model"]["seq_len"]
    ms, losses = {"before": [], "after": []}, {}
    for _ in range(rounds):
        for key, binary in (("before", other), ("after", LOOM)):
            run = run_loom(path, steps, threads, peak, degrees, options, loom=binary)
            ms[key] += [r["step_ms"] for r in run[WARMUP:]]
            losses.setdefault(key, [r["loss"] for r in run])
    out = {"workload": workload, "threads": threads, "steps": steps * rounds, "before_binary": other,
           "same_losses": losses["before"] == losses["after"]}
    for key in ms:
        step_ms = statistics.median(ms[key])
        out[key] = {"step_ms": step_ms, "step_ms_spread": [min(ms[key]), max(ms[key])],
                    "tokens_per_s": tokens_per_step / (step_ms / 1e3)}
    out["ratio_after_vs_before"] = out["before"]["step_ms"] / out["after"]["step_ms"]
    return out


def pipelines(steps, threads, peak):
    """gpt-small at pp = 2 and 4 under every schedule: the measured bubble beside the simulator's
    prediction for the same (measured) action times, per-stage peak memory; loom only."""
    path, cfg = effective_config("gpt-small")
    tokens_per_step = cfg["train"]["global_batch"] * cfg["model"]["seq_len"]
    wanted = os.environ.get("BENCH_SCHEDULES", ",".join(SCHEDULES)).split(",")
    for pp in (int(x) for x in os.environ.get("BENCH_PP", "2,4").split(",")):
        for name, options in SCHEDULES.items():
            if name not in wanted:
                continue
            run = run_loom(path, steps, threads, peak, {"pp": pp}, options)
            timed = run[WARMUP:]
            step_ms = statistics.median(r["step_ms"] for r in timed)
            measured = statistics.median(r["bubble_fraction"] for r in timed)
            predicted = statistics.median(r["predicted_bubble_fraction"] for r in timed)
            print(json.dumps({
                "workload": f"gpt-small@pp{pp}+{name}", "layout": {"pp": pp, "schedule": name}, "threads": threads,
                "steps": steps, "step_ms": step_ms, "tokens_per_s": tokens_per_step / (step_ms / 1e3),
                "bubble_fraction": measured, "predicted_bubble_fraction": predicted,
                "measured_vs_predicted": measured / predicted if predicted > 0 else None,
                "peak_bytes_by_stage": timed[-1]["peak_bytes_by_stage"], "loss_last": run[-1]["loss"]}), flush=True)


def long_sequences(threads):
    """gpt-long: peak bytes per rank against the sequence length for sp = 1, 2, 4 in each sp_mode
    (one step each: the peak is reached in the first), with the communication per step by axis.
    BENCH_SEQS (comma-separated, default 8192,16384,32768,65536) picks the lengths."""
    path, _ = effective_config("gpt-long")
    seqs = [int(x) for x in os.environ.get("BENCH_SEQS", "8192,16384,32768,65536").split(",")]
    for seq in seqs:
        for sp, mode in [(1, "allgather")] + [(sp, m) for sp in (2, 4) for m in ("allgather", "ring", "ulysses")]:
            with tempfile.TemporaryDirectory() as tmp:
                metrics = os.path.join(tmp, "metrics.jsonl")
                sets = [f"model.seq_len={seq}", f"parallel.sp={sp}", f"parallel.sp_mode={mode}", "train.steps=1",
                        f"train.threads={max(1, threads // sp)}"]
                launch = mpirun(sp) if sp > 1 else []
                subprocess.run(launch + [LOOM, "train", "-c", path, "--quiet", "--metrics", metrics, "--peak-flops",
                                         "1e11"] + [a for x in sets for a in ("--set", x)], check=True)
                with open(metrics) as f:
                    record = json.loads(f.readline())
            print(json.dumps({"workload": "gpt-long", "seq_len": seq, "sp": sp, "sp_mode": mode if sp > 1 else None,
                              "peak_bytes_per_rank": record["peak_bytes"], "step_ms": record["step_ms"],
                              "comm_bytes_per_step": record["comm_bytes_per_step"], "loss": record["loss"]}),
                  flush=True)


SPARSE = {"dlrm-sparse": "samples_per_s", "gpt-bigvocab": "tokens_per_s"}


def sparse(workload, steps, rounds, threads, peak):
    """dlrm-sparse / gpt-bigvocab at dp = 2 and 4 (BENCH_DPS): the hybrid exchange (parallel.sparse
    = on, partition count chosen by loom's trials) against dense all-reduce (sparse = off),
    alternating in every round; bytes over dp per step, step time, peak memory. Then every
    partition count loom's trials consider, forced, to find the measured best beside the chosen one.
    BENCH_TABLE_ROWS shrinks DLRM's tables; a dense run that would not fit in this machine's memory
    (parameters, gradients and two moments on every rank) is skipped and its bytes computed."""
    path, cfg = effective_config(workload)
    m, t = cfg["model"], cfg["train"]
    rows = int(os.environ.get("BENCH_TABLE_ROWS", m.get("table_rows", 0)))
    base = [f"model.table_rows={rows}"] if workload == "dlrm-sparse" else []
    unit = SPARSE[workload]
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for dp in [int(x) for x in os.environ.get("BENCH_DPS", "2,4").split(",")]:
        batch = [f"train.global_batch={t['micro_batch'] * dp}"] if workload == "gpt-bigvocab" else []
        options = {"hybrid": base + batch + ["parallel.sparse=on"], "dense": base + batch + ["parallel.sparse=off"]}
        runs = {"hybrid": [], "dense": []}
        first = run_loom(path, steps, threads, peak, {"dp": dp}, options["hybrid"])
        table_params = (m["tables"] * rows if workload == "dlrm-sparse" else m["vocab"]) * m["d_model"]
        dense_need = dp * table_params * 4 * 4  # value, gradient, two moments per rank, float32
        dense_fits = dense_need < 0.8 * mem_total
        for r in range(rounds):
            runs["hybrid"].append(first if r == 0 else run_loom(path, steps, threads, peak, {"dp": dp}, options["hybrid"]))
            if dense_fits:
                runs["dense"].append(run_loom(path, steps, threads, peak, {"dp": dp}, options["dense"]))

        def summary(key):
            if not runs[key]:
                return {"skipped": f"needs {dense_need / 2**30:.1f} GiB over {dp} ranks, more than this machine holds",
                        "comm_bytes_per_step_dp": 4 * table_params}
            ms = [r["step_ms"] for run in runs[key] for r in run[WARMUP:]]
            last = runs[key][0][-1]
            return {"step_ms": statistics.median(ms), "step_ms_spread": [min(ms), max(ms)],
                    unit: statistics.median(r[unit] for run in runs[key] for r in run[WARMUP:]),
                    "comm_bytes_per_step_dp": last["comm_bytes_per_step"].get("dp", 0),
                    "peak_bytes": max(r["peak_bytes"] for run in runs[key] for r in run),
                    "sparse_partitions": last["sparse_partitions"],
                    "loss_first": runs[key][0][0]["loss"], "loss_last": last["loss"]}

        hybrid, dense = summary("hybrid"), summary("dense")
        out = {"workload": workload, "layout": {"dp": dp}, "table_rows": rows if workload == "dlrm-sparse" else m["vocab"],
               "threads": threads, "steps": steps * rounds, "hybrid": hybrid, "dense": dense,
               "bytes_hybrid_vs_dense": hybrid["comm_bytes_per_step_dp"] / dense["comm_bytes_per_step_dp"]}
        if "step_ms" in dense:
            out["speedup_hybrid_vs_dense"] = dense["step_ms"] / hybrid["step_ms"]
        # The partition counts loom's trials consider (multiples of dp), one owner, and loom's choice,
        # each forced in the same way: the measured best beside the chosen one.
        candidates = sorted({1, dp, 2 * dp, 4 * dp, 8 * dp, hybrid["sparse_partitions"]})
        sweep = {}
        for p in candidates:
            run = run_loom(path, steps, threads, peak, {"dp": dp}, options["hybrid"] + [f"parallel.sparse_partitions={p}"])
            sweep[p] = statistics.median(r["step_ms"] for r in run[WARMUP:])
        best = min(sweep, key=sweep.get)
        out["partitions"] = {"chosen": hybrid["sparse_partitions"], "measured_step_ms": sweep, "measured_best": best,
                             "chosen_vs_best_step_ms": sweep[hybrid["sparse_partitions"]] / sweep[best]}
        print(json.dumps(out), flush=True)


def host(loom=None):
    """The CPU model and what the loom binary is built on (`loom --version`: its libtorch and that
    libtorch's BLAS): figures from different hosts or builds differ."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), None)
    version = subprocess.run([loom or LOOM, "--version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "loom": version.splitlines()}


# Goals of the bf16 rows (issue 14): (config, dp) -> {ratio name: at least}.
BF16_GOALS = {("gpt-small", 1): {"loom_bf16_vs_loom_fp32": 2.0, "loom_bf16_vs_pytorch_autocast_bf16": 1.25},
              ("gpt-small", 2): {"loom_bf16_vs_pytorch_autocast_bf16": 1.25}}


def bf16(workload, steps, rounds, threads, peak):
    """NAME-bf16[@dpN]: loom bf16, loom fp32, PyTorch autocast bf16 and PyTorch fp32 on configs/NAME.toml,
    in that order in every round (dp ranks of threads / dp threads each, the peer under DDP at dp > 1).
    Tokens/s from the median step; a loom bf16 run this build refuses is reported as unsupported. The bf16
    run's MFU is against `loom bench gemm --dtype bfloat16`; where that is missing (gemm_peak null) loom
    measures its own peak at start."""
    base, _, layout = workload.partition("@")
    name = base.removesuffix("-bf16")
    degrees, options = parse_layout(layout)
    options.append("parallel.sparse=off")  # the peers' token tables are dense (dense AdamW): the same math
    dp = degrees.get("dp", 1)
    path, cfg = effective_config(name)
    tokens_per_step = cfg["train"]["global_batch"] * cfg["model"]["seq_len"]
    peer_cfg = {"bf16": {**cfg, "model": {**cfg["model"], "dtype": "bfloat16"}},
                "fp32": {**cfg, "model": {**cfg["model"], "dtype": "float32"}}}
    # loom refuses model.dtype = bfloat16 until mixed precision lands: ask its config check first.
    probe = subprocess.run([LOOM, "config", "--print", "-c", path, "--set", "model.dtype=bfloat16"],
                           capture_output=True, text=True)
    unsupported = (probe.stderr.strip().splitlines() or ["loom config failed"])[-1] if probe.returncode else None
    peak_bf16 = gemm_peak_bf16(max(1, threads // dp)) if not unsupported else None
    loom_runs, peer_runs = {"bf16": [], "fp32": []}, {"bf16": [], "fp32": []}
    for _ in range(rounds):
        if not unsupported:
            try:
                loom_runs["bf16"].append(run_loom(path, steps, threads, peak_bf16, degrees,
                                                  options + ["model.dtype=bfloat16"]))
            except subprocess.CalledProcessError as e:
                unsupported = f"loom train exited with status {e.returncode}"
        loom_runs["fp32"].append(run_loom(path, steps, threads, peak, degrees, options + ["model.dtype=float32"]))
        for key in ("bf16", "fp32"):
            peer_runs[key].append(run_peer(peer_cfg[key], steps, threads, dp))

    def loom_summary(key):
        if key == "bf16" and unsupported:
            return {"unsupported": unsupported}
        ms = [r["step_ms"] for run in loom_runs[key] for r in run[WARMUP:]]
        step_ms = statistics.median(ms)
        return {"step_ms": step_ms, "step_ms_spread": [min(ms), max(ms)],
                "tokens_per_s": tokens_per_step / (step_ms / 1e3),
                "mfu": statistics.median(r["mfu"] for run in loom_runs[key] for r in run[WARMUP:]),
                "gemm_peak_flops_per_s": peak_bf16 if key == "bf16" else peak,
                "peak_bytes": max(r["peak_bytes"] for run in loom_runs[key] for r in run),
                "comm_bytes_per_step": loom_runs[key][0][-1].get("comm_bytes_per_step", {}),
                "loss_first": loom_runs[key][0][0]["loss"], "loss_last": loom_runs[key][0][-1]["loss"]}

    def peer_summary(key):
        ms = [p["step_ms"] for p in peer_runs[key]]
        step_ms = statistics.median(ms)
        first = peer_runs[key][0]
        return {"impl": first["impl"] + ("+autocast-bf16" if key == "bf16" else ""), "torch": first["torch"],
                "step_ms": step_ms, "step_ms_spread": [min(ms), max(ms)],
                "tokens_per_s": tokens_per_step / (step_ms / 1e3),
                "loss_first": first["loss_first"], "loss_last": first["loss_last"]}

    runs = {"loom_bf16": loom_summary("bf16"), "loom_fp32": loom_summary("fp32"),
            "pytorch_autocast_bf16": peer_summary("bf16"), "pytorch_fp32": peer_summary("fp32")}

    def ratio(a, b):  # tokens/s of a over b; None where a did not run
        return runs[a]["tokens_per_s"] / runs[b]["tokens_per_s"] if "tokens_per_s" in runs[a] else None

    ratios = {"loom_bf16_vs_loom_fp32": ratio("loom_bf16", "loom_fp32"),
              "loom_bf16_vs_pytorch_autocast_bf16": ratio("loom_bf16", "pytorch_autocast_bf16"),
              "loom_fp32_vs_pytorch_fp32": ratio("loom_fp32", "pytorch_fp32"),
              "pytorch_autocast_bf16_vs_pytorch_fp32": ratio("pytorch_autocast_bf16", "pytorch_fp32")}
    goals = BF16_GOALS.get((name, dp), {})
    return {"workload": workload, "config": name, "layout": {"dp": dp, "options": options}, "threads": threads,
            "steps": steps * rounds, "host": host(), **runs, "ratios": ratios,
            "goals": {k: {"at_least": v, "reached": None if ratios[k] is None else ratios[k] >= v}
                      for k, v in goals.items()}}


# The table of issue 34 (docs/benchmarks.md, "PyTorch 2"): (row, config, dp, dtype, loom --set options).
# The long row trains gpt-long at 8192 tokens with a position table of that length, the peer's.
TORCH2_ROWS = [("gpt-tiny", "gpt-tiny", 1, "float32", []), ("gpt-tiny@dp2", "gpt-tiny", 2, "float32", []),
               ("gpt-small", "gpt-small", 1, "float32", []), ("gpt-small-bf16", "gpt-small", 1, "bfloat16", []),
               ("llama-small", "llama-small", 1, "float32", []), ("llama-small-bf16", "llama-small", 1, "bfloat16", []),
               ("gpt-long-8k", "gpt-long", 1, "float32", ["model.seq_len=8192", "model.max_positions=8192"])]


def torch2(steps, rounds, threads, only=None):
    """`torch2` (or `torch2:ROW`): each row of TORCH2_ROWS four ways, alternating in every round: loom on
    this build (its libtorch: PyTorch 2's), loom on another build (BENCH_LOOM_OLD, a loom binary on
    Debian's libtorch 1.13; skipped when unset), PyTorch 2 eager (fused SDPA attention) and PyTorch 2
    under torch.compile (BENCH_COMPILE=0 leaves it out; a compile that fails is reported as such).
    Tokens/s from the median step; peak resident bytes of one-process runs (os.wait4's ru_maxrss)."""
    old = os.environ.get("BENCH_LOOM_OLD")
    with_compile = os.environ.get("BENCH_COMPILE", "1") != "0"
    for row, name, dp, dtype, sets in TORCH2_ROWS:
        if only and row != only:
            continue
        path, cfg = effective_config(name, sets)
        cfg["model"]["dtype"] = dtype
        options = sets + [f"model.dtype={dtype}", "parallel.sparse=off"]
        tokens_per_step = cfg["train"]["global_batch"] * cfg["model"]["seq_len"]
        degrees = {"dp": dp}
        runs = {"loom": [], "loom_old": [], "pytorch_eager": [], "pytorch_compile": []}
        rss = {"loom": [], "loom_old": []}
        failed = {}
        for _ in range(rounds):
            runs["loom"].append([r["step_ms"] for r in run_loom(path, steps, threads, 1e11, degrees, options, rss=rss["loom"])[WARMUP:]])
            if old:
                try:
                    runs["loom_old"].append([r["step_ms"] for r in run_loom(path, steps, threads, 1e11, degrees, options, loom=old,
                                                                            rss=rss["loom_old"])[WARMUP:]])
                except subprocess.CalledProcessError as e:
                    failed["loom_old"] = f"exit status {e.returncode}"
            peer = run_peer(cfg, steps, threads, dp)
            runs["pytorch_eager"].append([peer["step_ms"]])
            rss.setdefault("pytorch_eager", []).append(peer.get("peak_rss_bytes"))
            if with_compile and "pytorch_compile" not in failed:
                try:
                    peer = run_peer(cfg, steps, threads, dp, ["--compile"])
                    runs["pytorch_compile"].append([peer["step_ms"]])
                    rss.setdefault("pytorch_compile", []).append(peer.get("peak_rss_bytes"))
                except (subprocess.CalledProcessError, SystemExit) as e:
                    failed["pytorch_compile"] = str(e)

        def summary(key):
            ms = [x for run in runs[key] for x in run]
            if not ms:
                return {"failed": failed[key]} if key in failed else None
            step_ms = statistics.median(ms)
            peaks = [x for x in rss.get(key, []) if x]
            return {"step_ms": step_ms, "step_ms_spread": [min(ms), max(ms)], "tokens_per_s": tokens_per_step / (step_ms / 1e3),
                    "peak_rss_bytes": max(peaks) if peaks else None}

        out = {key: summary(key) for key in runs}
        loom = out["loom"]["tokens_per_s"]
        ratios = {f"loom_vs_{k}": loom / v["tokens_per_s"] for k, v in out.items() if k != "loom" and v and "tokens_per_s" in v}
        if out["loom"]["peak_rss_bytes"] and out["pytorch_eager"]["peak_rss_bytes"]:
            ratios["loom_rss_vs_pytorch_eager_rss"] = out["loom"]["peak_rss_bytes"] / out["pytorch_eager"]["peak_rss_bytes"]
        print(json.dumps({"workload": f"torch2:{row}", "config": name, "dp": dp, "dtype": dtype, "threads": threads,
                          "steps": steps * rounds, "host": host(), "host_old": host(old) if old else None,
                          **out, "ratios": ratios}), flush=True)


# parallel.sparse = "auto" beside forced "on" and "off" (NOTE [Table paths]): the workloads of the
# issue's goal, each at its dp. dlrm-sparse's tables shrink to BENCH_TABLE_ROWS (250,000 by
# default) so that its dense run fits in memory at dp = 4.
SPARSE_CHOICE = [("gpt-tiny", 2), ("gpt-bigvocab", 2), ("dlrm-sparse", 2), ("dlrm-sparse", 4)]


def sparse_choice(steps, rounds, threads, peak, only=None):
    """`sparse-choice` (or `sparse-choice:NAME@dpN`): loom with parallel.sparse = auto, on and off,
    alternating in every round, all with the default train.table_update (dense: the same model
    whichever path). Reports each variant's median step time, bytes over dp per step and auto's
    choice per table with its measured times, and auto's step time over the better forced one
    (goal: at most 1.05)."""
    cases = SPARSE_CHOICE
    if only:
        name, _, layout = only.partition("@")
        cases = [(name, int(layout[2:]) if layout.startswith("dp") else 2)]
    for workload, dp in cases:
        path, cfg = effective_config(workload)
        m, t = cfg["model"], cfg["train"]
        base = [f"train.global_batch={t['micro_batch'] * dp}"] if workload == "gpt-bigvocab" else []
        if workload == "dlrm-sparse":
            base.append(f"model.table_rows={int(os.environ.get('BENCH_TABLE_ROWS', '250000'))}")
        runs = {mode: [] for mode in ("auto", "on", "off")}
        for _ in range(rounds):
            for mode in runs:
                runs[mode].append(run_loom(path, steps, threads, peak, {"dp": dp}, base + [f"parallel.sparse={mode}"]))

        def summary(mode):
            ms = [r["step_ms"] for run in runs[mode] for r in run[WARMUP:]]
            return {"step_ms": statistics.median(ms), "step_ms_spread": [min(ms), max(ms)],
                    "comm_bytes_per_step_dp": runs[mode][0][-1]["comm_bytes_per_step"].get("dp", 0),
                    "tables": [sorted({(c["path"], c["reason"]) for c in run[-1]["sparse_tables"]}) for run in runs[mode]],
                    "loss_last": runs[mode][0][-1]["loss"]}

        out = {"workload": f"{workload}@dp{dp}", "threads": threads, "ranks": dp, "cores": os.cpu_count(),
               "steps": steps * rounds, "options": base, **{mode: summary(mode) for mode in runs}}
        out["auto_measured_ms"] = [[{k: c[k] for k in ("table", "path", "sparse_ms", "dense_ms")}
                                    for c in run[-1]["sparse_tables"]][:2] for run in runs["auto"]]
        better = min(out["on"]["step_ms"], out["off"]["step_ms"])
        out["better_forced"] = "on" if out["on"]["step_ms"] <= out["off"]["step_ms"] else "off"
        out["auto_vs_better"] = out["auto"]["step_ms"] / better
        out["on_speedup_vs_off"] = out["off"]["step_ms"] / out["on"]["step_ms"]
        print(json.dumps(out), flush=True)


def dd_write_bandwidth(directory, megabytes):
    """Bytes/s of a sequential write of `megabytes` MiB with fsync, as dd reports it."""
    target = os.path.join(directory, "dd.bin")
    out = subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=16M", f"count={megabytes // 16}",
                          "conv=fsync"], check=True, capture_output=True, text=True).stderr
    os.remove(target)
    last = out.strip().splitlines()[-1]  # "N bytes (...) copied, S s, R MB/s"
    return int(last.split()[0]) / float(last.split(",")[-2].split()[0])


def checkpoint(threads, rounds):
    """gpt-small: save bandwidth against dd's, async hiding, load time (one rank).

    A run of 8 steps saves after steps 3 and 6 (and 8, not measured). A save's exposed time is
    what it held the run (checkpoint_s: the whole save, or the async copy) plus how much slower the
    next step ran than the run's other steps (2, 3, 5, 6: the async writer runs during the next
    one); the async save hides 1 - its exposed time over the synchronous one's."""
    path = os.path.join(ROOT, "configs", "gpt-small.toml")
    steps, every = 8, 3
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_CKPT_DIR")) as tmp:
        def run(mode):
            sets = [f"train.steps={steps}", f"train.threads={threads}", f"checkpoint.dir={tmp}/{mode}",
                    f"checkpoint.every={every}", f"checkpoint.async={'true' if mode == 'async' else 'false'}",
                    "checkpoint.keep=1"]
            metrics = os.path.join(tmp, f"{mode}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            subprocess.run([LOOM, "train", "-c", path, "--quiet", "--metrics", metrics, "--peak-flops", "1e11"]
                           + [a for x in sets for a in ("--set", x)], check=True)
            with open(metrics) as f:
                return {r["step"]: r for r in (json.loads(line) for line in f)}

        def exposed(r):
            base = statistics.median(r[s]["step_ms"] for s in (2, 3, 5, 6)) / 1e3
            return statistics.mean(r[s]["checkpoint_s"] + r[s + 1]["step_ms"] / 1e3 - base for s in (3, 6))

        out = {"sync": [], "async": [], "save_s": [], "over_dd": [], "dd": [], "held_async": []}
        files = 0
        for _ in range(rounds):
            out["dd"].append(dd_write_bandwidth(tmp, 512))
            sync, asyn = run("sync"), run("async")
            ck = os.path.join(tmp, "sync", f"step-{steps:07d}")
            files = sum(os.path.getsize(os.path.join(ck, f)) for f in os.listdir(ck))
            save = statistics.mean(sync[s]["checkpoint_s"] for s in (3, 6))
            out["save_s"].append(save)
            out["over_dd"].append(files / save / out["dd"][-1])
            out["sync"].append(exposed(sync))
            out["async"].append(exposed(asyn))
            out["held_async"].append(statistics.mean(asyn[s]["checkpoint_s"] for s in (3, 6)))
        resume = subprocess.run([LOOM, "train", "-c", path, "--peak-flops", "1e11", "--resume",
                                 os.path.join(tmp, "sync", f"step-{steps:07d}")]
                                + [a for x in [f"train.steps={steps + 1}", f"train.threads={threads}"]
                                   for a in ("--set", x)], check=True, capture_output=True, text=True).stdout
        load = [line for line in resume.splitlines() if "resumed from" in line]
        load_s = float(load[0].split(" in ")[-1].split(" s)")[0]) if load else None
        med = {k: statistics.median(v) for k, v in out.items()}
        print(json.dumps({
            "workload": "checkpoint", "config": "gpt-small", "checkpoint_bytes": files,
            "save_s": round(med["save_s"], 3), "dd_write_bytes_per_s": round(med["dd"]),
            "save_over_dd": round(med["over_dd"], 3), "goal_save_over_dd": 0.70,
            "exposed_sync_s": round(med["sync"], 3), "exposed_async_s": round(med["async"], 3),
            "async_held_s": round(med["held_async"], 3),
            "async_hidden": round(1 - med["async"] / med["sync"], 3) if med["sync"] > 0 else None,
            "goal_async_hidden": 0.80, "load_s": load_s, "load_bytes_per_s": round(files / load_s) if load_s else None,
            "rounds": rounds, "note": "one rank, train.threads = all cores; the async writer shares them"}), flush=True)


# The memory workload (issue 16, docs/memory.md): the largest batch each memory policy trains under
# one fixed per-rank budget, auto's step time against the manual combinations at its batch, the
# plan's predicted peak and step time against the measured ones, and whether swap hides.
MEMORY_CASES = [("gpt-small", 2), ("gpt-small", 4), ("llama-small", 2)]
MEMORY_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)  # micro-batch sizes (GPipe: micro-batch counts) tried
MEMORY_POLICIES = {
    "gpipe-none": ["parallel.schedule=gpipe"],  # micro-batch 1, the count grows
    "1f1b-none": ["parallel.schedule=1f1b"],
    "1f1b-full": ["parallel.schedule=1f1b", "memory.recompute=full"],
    "1f1b-stage-aware": ["parallel.schedule=1f1b", "memory.recompute=stage-aware", "memory.recompute_ratio=0.5"],
    "1f1b-swap-all": ["parallel.schedule=1f1b", "memory.swap=all"],
    "auto": ["parallel.schedule=1f1b", "memory.policy=auto", "parallel.partition=auto"],
}
MEMORY_TIMEOUT_S = 900  # one train or profile run; past it the run is killed and recorded as a hang


def set_args(sets):
    return [a for s in sets for a in ("--set", s)]


def run_locked(cmd, timeout=MEMORY_TIMEOUT_S):
    """(rc, stdout, stderr, seconds) of cmd, holding the flock of BENCH_LOCK (if set) for its duration, so
    that builds and tests sharing the machine take turns with the timed run (seconds: the run's own, not
    the wait for the lock); a run past `timeout` is killed with its process group (rc 124)."""
    lock = open(os.environ["BENCH_LOCK"], "a") if os.environ.get("BENCH_LOCK") else None
    try:
        if lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            return proc.returncode, out, err, time.time() - start
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return 124, out, err + f"\n(killed after {timeout} s)", time.time() - start
    finally:
        if lock:
            lock.close()


def last_lines(text, n=3):
    return [line for line in text.strip().splitlines() if line.strip()][-n:]


def error_lines(text):
    """loom's own error lines of a failed run (each rank's), else the last lines (MPI's)."""
    mine = [line for line in text.splitlines() if line.startswith("loom: error:")]
    return mine[:4] or last_lines(text)


def memory_plan(loom, path, sets):
    """`loom config --json` (every check train runs): (plan, None) or (None, its error line)."""
    out = subprocess.run([loom, "config", "-c", path, "--json"] + set_args(sets), capture_output=True, text=True)
    if out.returncode:
        return None, " ".join(last_lines(out.stderr, 1)) or f"exit {out.returncode}"
    return json.loads(out.stdout), None


def memory_profile(loom, path, micro_batch, out):
    """`loom profile` at micro_batch in one process, one thread: the copy bandwidth it measured."""
    rc, _, err, seconds = run_locked([loom, "profile", "-c", path, "--out", out] +
                            set_args([f"train.micro_batch={micro_batch}", f"train.global_batch={micro_batch}",
                                      "train.threads=1"]))
    if rc:
        sys.exit(f"loom: error: loom profile failed (exit {rc}): {' '.join(last_lines(err))}")
    with open(out) as f:
        copy = json.load(f)["copy"]
    return {"micro_batch": micro_batch, "seconds": round(seconds, 1), **copy}


def memory_measure(loom, path, pp, sets, steps):
    """The plan of `sets` and, when loom config accepts it, a real run of 1 warm-up + `steps` timed
    steps on pp ranks: predicted against measured peak per stage and step time."""
    plan, refusal = memory_plan(loom, path, sets)
    if plan is None:
        return {"fits": False, "refusal": refusal}
    out = {"fits": True, "cuts": plan["cuts"], "profiled": plan["profiled"],
           "layer_policy_by_stage": ["".join(l["policy"][0] for l in s["layers"]) for s in plan["stages"]],
           "predicted_peak_bytes_by_stage": [s["memory"]["total"] for s in plan["stages"]],
           "predicted_host_bytes_by_stage": [s["memory"]["host"] for s in plan["stages"]],
           "predicted_step_s": plan["predicted_step_s"]}
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        rc, _, err, _ = run_locked(mpirun(pp) + [loom, "train", "-c", path, "--quiet", "--metrics", metrics,
                                              "--peak-flops", "1e11"] + set_args(sets + [f"train.steps={steps + 1}"]))
        records = []
        if os.path.exists(metrics):
            with open(metrics) as f:
                records = [json.loads(line) for line in f]
    if rc or len(records) < steps + 1:
        out.update(verified=False, rc=rc, steps_done=len(records), error=error_lines(err))
        return out
    timed = [r["step_ms"] for r in records[1:]]
    step_ms = statistics.mean(timed)
    measured = records[-1]["peak_bytes_by_stage"]
    out.update(verified=True, step_ms=step_ms, step_ms_each=timed, measured_peak_bytes_by_stage=measured,
               peak_predicted_over_measured=[p / m for p, m in zip(out["predicted_peak_bytes_by_stage"], measured)],
               host_peak_bytes=records[-1]["host_peak_bytes"],
               step_predicted_over_measured=plan["predicted_step_s"] * 1e3 / step_ms,
               loss_last=records[-1]["loss"])
    return out


def memory(only=None):
    """`memory` (or `memory:MODEL`, `memory:MODEL@ppN`): per model and pp (MEMORY_CASES), schedule 1F1B
    unless said, M = 2 pp micro-batches per step, one thread per rank:
    1. `loom profile` at micro-batch 1 (its copy bandwidth is reported).
    2. The budget B per rank: plain 1F1B's largest stage estimate at micro-batch 1 (`loom config`) x 1.10,
       rounded up to a MiB.
    3. Per policy (MEMORY_POLICIES) the largest micro-batch in MEMORY_SIZES (GPipe: micro-batch count at
       micro-batch 1) that `loom config` accepts under B, verified by a run of 1 warm-up + 2 timed steps
       (the accounting allocator enforces B); a failed run retries the next smaller accepted size.
       memory.profile is the micro-batch-1 profile where the micro-batch is 1, unset (analytic times)
       elsewhere. Ratios: auto's samples per step over GPipe's and 1F1B's without recomputation.
    4. At auto's micro-batch: `loom profile` again at that size (unless 1), then auto and every manual
       recompute (none/full/stage-aware) x swap (none/all) x partition (compute/memory) that the plan
       accepts under B, all with that profile; manual combinations whose plan (cuts and per-layer policy)
       equals an earlier one's share its run. Auto's step time over the fastest manual one.
    5. Every run reports the predicted peak per stage over the measured one and predicted_step_s over
       the measured step (meaningful where the ranks do not outnumber the cores).
    6. Swap hides: 1F1B at micro-batch 1 with the profile, memory.swap = all against none, alternating
       for BENCH_ROUNDS rounds (mean of the timed steps).
    One JSON line per measurement ("measure": profile, budget, batch, batch-ratios, step-time,
    step-time-summary, swap-hides, summary)."""
    cases = MEMORY_CASES
    if only:
        name, _, layout = only.partition("@")
        cases = [(name, int(layout[2:]))] if layout.startswith("pp") else [(name, 2), (name, 4)]
    rounds = int(os.environ.get("BENCH_ROUNDS", "2"))
    steps = 2
    started = time.time()
    summary = []
    # A private copy of the binary: a rebuild of build/bin/loom during the hour this takes must not
    # mix two builds (a profile written by one and read by another, timings of both).
    snapshot = tempfile.TemporaryDirectory()
    loom = os.path.join(snapshot.name, "loom")
    run_locked(["cp", "-p", LOOM, loom], timeout=60)  # under the lock: not while a build writes it
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"workload": "memory", "measure": "binary", "commit": commit,
                      "binary_mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(LOOM)))}),
          flush=True)
    for name, pp in cases:
        path, _ = effective_config(name)
        M = 2 * pp
        head = {"workload": "memory", "model": name, "pp": pp, "microbatches": M, "threads_per_rank": 1,
                "cores": os.cpu_count()}
        with tempfile.TemporaryDirectory() as tmp:
            prof1 = os.path.join(tmp, "profile-mb1.json")
            copy = memory_profile(loom, path, 1, prof1)
            print(json.dumps({**head, "measure": "profile", **copy}), flush=True)

            base = [f"parallel.pp={pp}", "train.threads=1", "train.warmup=0"]
            plain, refusal = memory_plan(loom, path, base + ["parallel.schedule=1f1b", "train.micro_batch=1",
                                                       f"train.global_batch={M}"])
            if plain is None:
                sys.exit(f"loom: error: plain 1F1B's plan failed: {refusal}")
            plain_peaks = [s["memory"]["total"] for s in plain["stages"]]
            budget_mib = math.ceil(max(plain_peaks) * 1.10 / 2**20)
            base.append(f"memory.budget={budget_mib}MiB")
            print(json.dumps({**head, "measure": "budget", "budget_mib": budget_mib,
                              "plain_1f1b_mb1_predicted_peak_bytes_by_stage": plain_peaks}), flush=True)

            def batch_sets(policy, m, profile=None):
                if policy == "gpipe-none":
                    sets = MEMORY_POLICIES[policy] + ["train.micro_batch=1", f"train.global_batch={m}"]
                else:
                    sets = MEMORY_POLICIES[policy] + [f"train.micro_batch={m}", f"train.global_batch={m * M}"]
                profile = profile or (prof1 if policy == "gpipe-none" or m == 1 else None)
                return base + sets + ([f"memory.profile={profile}"] if profile else [])

            # 3. The largest batch per policy.
            best = {}
            for policy in MEMORY_POLICIES:
                accepted = [m for m in MEMORY_SIZES if memory_plan(loom, path, batch_sets(policy, m))[0] is not None]
                refused_first = next((m for m in MEMORY_SIZES if m not in accepted), None)
                attempts = []
                for m in reversed(accepted):
                    r = memory_measure(loom, path, pp, batch_sets(policy, m), steps)
                    samples = m if policy == "gpipe-none" else m * M
                    attempts.append({"m": m, "samples_per_step": samples, **r})
                    if r.get("verified"):
                        break
                final = attempts[-1] if attempts and attempts[-1].get("verified") else None
                best[policy] = final
                line = {**head, "measure": "batch", "policy": policy, "budget_mib": budget_mib,
                        "size_is": "micro-batch count at micro-batch 1" if policy == "gpipe-none" else "micro-batch size",
                        "config_accepts": accepted,
                        "first_refusal": memory_plan(loom, path, batch_sets(policy, refused_first))[1] if refused_first else None,
                        "m": final["m"] if final else None,
                        "samples_per_step": final["samples_per_step"] if final else 0,
                        "verified": final is not None, "failed_attempts": attempts[:-1] if final else attempts}
                if final:
                    line.update({k: v for k, v in final.items() if k not in ("m", "samples_per_step")})
                print(json.dumps(line), flush=True)

            def samples(policy):
                return best[policy]["samples_per_step"] if best[policy] else 0

            ratios = {"auto_vs_gpipe_none": samples("auto") / samples("gpipe-none") if samples("gpipe-none") else None,
                      "auto_vs_1f1b_none": samples("auto") / samples("1f1b-none") if samples("1f1b-none") else None}
            print(json.dumps({**head, "measure": "batch-ratios", "budget_mib": budget_mib,
                              "samples_per_step": {p: samples(p) for p in MEMORY_POLICIES}, **ratios,
                              "goals": {"auto_vs_gpipe_none": 4.0, "auto_vs_1f1b_none": 2.0}}), flush=True)

            # 4. Step time at auto's batch: auto against every manual combination that fits.
            step_summary = None
            if best["auto"]:
                m = best["auto"]["m"]
                prof_m = prof1
                if m != 1:
                    prof_m = os.path.join(tmp, f"profile-mb{m}.json")
                    copy_m = memory_profile(loom, path, m, prof_m)
                    print(json.dumps({**head, "measure": "profile", **copy_m}), flush=True)
                sets_m = [f"train.micro_batch={m}", f"train.global_batch={m * M}", f"memory.profile={prof_m}"]
                combos = {"auto": MEMORY_POLICIES["auto"]}
                for rec in ("none", "full", "stage-aware"):
                    for swap in ("none", "all"):
                        for part in ("compute", "memory"):
                            combos[f"recompute={rec},swap={swap},partition={part}"] = (
                                ["parallel.schedule=1f1b", f"memory.recompute={rec}", f"memory.swap={swap}",
                                 f"parallel.partition={part}"]
                                + (["memory.recompute_ratio=0.5"] if rec == "stage-aware" else []))
                done, times = {}, {}
                for combo, sets in combos.items():
                    plan, refusal = memory_plan(loom, path, base + sets + sets_m)
                    key = None if plan is None else (tuple(plan["cuts"]), tuple(
                        l["policy"] for s in plan["stages"] for l in s["layers"]))
                    if combo != "auto" and key in done:
                        r = {**done[key][1], "same_plan_as": done[key][0]}
                    else:
                        r = memory_measure(loom, path, pp, base + sets + sets_m, steps)
                        if combo != "auto" and key is not None:
                            done[key] = (combo, r)
                    if r.get("verified"):
                        times[combo] = r["step_ms"]
                    status = "does not fit" if not r["fits"] else ("ran" if r.get("verified") else "run failed")
                    print(json.dumps({**head, "measure": "step-time", "m": m, "samples_per_step": m * M,
                                      "budget_mib": budget_mib, "combination": combo, "status": status, **r}),
                          flush=True)
                manual = {c: t for c, t in times.items() if c != "auto"}
                fastest = min(manual, key=manual.get) if manual else None
                step_summary = {"m": m, "auto_step_ms": times.get("auto"), "fastest_manual": fastest,
                                "fastest_manual_step_ms": manual.get(fastest),
                                "auto_vs_fastest_manual": times["auto"] / manual[fastest]
                                if fastest and "auto" in times else None, "goal_at_most": 1.10,
                                "does_not_fit": [c for c in combos if c not in times and c != "auto"]}
                print(json.dumps({**head, "measure": "step-time-summary", "budget_mib": budget_mib, **step_summary}),
                      flush=True)

            # 6. Swap hides: 1F1B at micro-batch 1 (fits without swap), swap = all against none.
            runs = {"none": [], "all": []}
            for _ in range(rounds):
                for swap in runs:
                    runs[swap].append(memory_measure(loom, path, pp, batch_sets("1f1b-none", 1) + [f"memory.swap={swap}"],
                                                     steps))
            hides = {"m": 1, "samples_per_step": M, "budget_mib": budget_mib,
                     "copy_device_to_host_bytes_per_s": copy["device_to_host_bytes_per_s"],
                     "copy_host_to_device_bytes_per_s": copy["host_to_device_bytes_per_s"]}
            for swap, rs in runs.items():
                ok = [r for r in rs if r.get("verified")]
                hides[swap] = {"verified_runs": len(ok), "runs": len(rs),
                               "step_ms": statistics.mean(t for r in ok for t in r["step_ms_each"]) if ok else None,
                               "step_ms_each": [t for r in ok for t in r["step_ms_each"]],
                               "measured_peak_bytes_by_stage": ok[-1]["measured_peak_bytes_by_stage"] if ok else None,
                               "predicted_peak_bytes_by_stage": rs[-1].get("predicted_peak_bytes_by_stage"),
                               "host_peak_bytes": ok[-1]["host_peak_bytes"] if ok else None,
                               "predicted_step_s": rs[-1].get("predicted_step_s"),
                               "errors": [r.get("error") or r.get("refusal") for r in rs if not r.get("verified")]}
            hides["swap_vs_keep"] = (hides["all"]["step_ms"] / hides["none"]["step_ms"]
                                     if hides["all"]["step_ms"] and hides["none"]["step_ms"] else None)
            hides["goal_at_most"] = 1.15
            print(json.dumps({**head, "measure": "swap-hides", **hides}), flush=True)
            summary.append({"model": name, "pp": pp, "budget_mib": budget_mib, **ratios,
                            "auto_vs_fastest_manual": step_summary and step_summary["auto_vs_fastest_manual"],
                            "swap_vs_keep": hides["swap_vs_keep"]})
    print(json.dumps({"workload": "memory", "measure": "summary", "cases": summary,
                      "elapsed_s": round(time.time() - started)}), flush=True)


# The simulator against measured runs (issue 17, NOTE [Step simulator]): `loom simulate` of a layout
# beside real `loom train` runs of the same config. SIM_ROWS: (config, label, --set values); the rank
# count is dp x tp x pp x sp. Every row runs SIM_BATCH (global batch, micro-batch) so that the whole
# workload fits in about 15 minutes on 2 cores; the plan check uses the same batch.
SIM_BATCH = (4, 1)
SIM_ROWS = [
    ("gpt-small", "single rank", []),
    ("gpt-small", "dp2", ["parallel.dp=2"]),
    ("gpt-small", "dp2 zero1", ["parallel.dp=2", "parallel.zero=1"]),
    ("gpt-small", "tp2", ["parallel.tp=2"]),
    ("gpt-small", "tp2 seq", ["parallel.tp=2", "parallel.tp_sequence=true"]),
    ("gpt-small", "pp2 gpipe", ["parallel.pp=2"] + SCHEDULES["gpipe"]),
    ("gpt-small", "pp2 1f1b", ["parallel.pp=2"] + SCHEDULES["1f1b"]),
    ("gpt-small", "pp2 interleaved x2", ["parallel.pp=2"] + SCHEDULES["interleaved"]),
    ("gpt-small", "pp2 zb-h1", ["parallel.pp=2"] + SCHEDULES["zb-h1"]),
    ("gpt-small", "pp2 scp (stage-aware 0.5)", ["parallel.pp=2"] + SCHEDULES["scp"]),
    ("gpt-small", "sp2 allgather", ["parallel.sp=2", "parallel.sp_mode=allgather"]),
    ("gpt-small", "sp2 ring", ["parallel.sp=2", "parallel.sp_mode=ring"]),
    ("gpt-small", "sp2 ulysses", ["parallel.sp=2", "parallel.sp_mode=ulysses"]),
    ("llama-small", "single rank", []),
    ("llama-small", "dp2", ["parallel.dp=2"]),
    ("llama-small", "tp2", ["parallel.tp=2"]),
    ("llama-small", "pp2 1f1b", ["parallel.pp=2"] + SCHEDULES["1f1b"]),
    ("gpt-small", "dp4", ["parallel.dp=4"]),
    ("gpt-small", "dp2 tp2", ["parallel.dp=2", "parallel.tp=2"]),
    ("gpt-small", "dp2 pp2 1f1b", ["parallel.dp=2", "parallel.pp=2"] + SCHEDULES["1f1b"]),
    ("gpt-small", "tp2 pp2 1f1b", ["parallel.tp=2", "parallel.pp=2"] + SCHEDULES["1f1b"]),
    ("gpt-small", "pp4 1f1b", ["parallel.pp=4"] + SCHEDULES["1f1b"]),
    ("gpt-small", "pp4 interleaved x2", ["parallel.pp=4"] + SCHEDULES["interleaved"]),
    ("gpt-small", "sp2 dp2 ring", ["parallel.sp=2", "parallel.dp=2", "parallel.sp_mode=ring"]),
]
SIM_TIMEOUT_S = 600


def sim_ranks(sets):
    degrees = {"dp": 1, "tp": 1, "pp": 1, "sp": 1}
    for s in sets:
        key, _, value = s.partition("=")
        if key.startswith("parallel.") and key[9:] in degrees:
            degrees[key[9:]] = int(value)
    return degrees["dp"] * degrees["tp"] * degrees["pp"] * degrees["sp"]


def local_cluster(directory, devices, share=1.0):
    """clusters/local.toml with `devices` devices on its node, each device's FLOP/s and memory
    bandwidth times `share` (ranks time-sharing the cores: cores / ranks): a file in `directory`."""
    import re
    with open(os.path.join(ROOT, "clusters", "local.toml")) as f:
        text = f.read()
    name = f"local-{devices}" + ("-shared" if share != 1.0 else "")
    text = re.sub(r"(?m)^per_node = \d+", f"per_node = {devices}", text)
    text = re.sub(r'(?m)^name = "local"', f'name = "{name}"', text)
    if share != 1.0:
        scale = lambda m: f"{m.group(1)}{float(m.group(2)) * share:.6g}"
        text = re.sub(r"(?m)^(memory_bandwidth = )(\S+)", scale, text)
        line = re.search(r"(?m)^peak_flops = .*$", text).group(0)
        text = text.replace(line, re.sub(r"(= )([0-9.e+]+)", scale, line))
    path = os.path.join(directory, f"{name}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def sim_predict(loom, path, sets, cluster, ranks, trace=None):
    out = subprocess.run([loom, "simulate", "-c", path, "--cluster", cluster, "--gpus", str(ranks), "--json"]
                         + (["--trace", trace] if trace else []) + set_args(sets), capture_output=True, text=True)
    if out.returncode:
        return None, " ".join(last_lines(out.stderr, 1)) or f"exit {out.returncode}"
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def cpu_busy_s():
    """Seconds of CPU time this machine spent busy (all cores, /proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_quiet(limit_s):
    """Waits (at most limit_s) until the machine's other work uses under a quarter of a core over
    one second; returns the cores it used in the last second looked at."""
    deadline = time.time() + limit_s
    while True:
        before = cpu_busy_s()
        time.sleep(1)
        busy = cpu_busy_s() - before
        if busy < 0.25 or time.time() >= deadline:
            return round(busy, 2)


def gemm_rates(loom):
    """Each core's float32 GEMM rate right now (n = 512, one thread pinned to the core, 0.5 s, all
    cores at once), in FLOP/s: how fast this shared host runs at the moment (its cores slow down
    at times with nothing else running in this machine), beside the cluster file's expected rate."""
    procs = [subprocess.Popen(["taskset", "-c", str(core), loom, "bench", "gemm", "--threads", "1", "--sizes", "512",
                               "--seconds", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for core in range(os.cpu_count() or 1)]
    rates = []
    for proc in procs:
        out = proc.communicate()[0]
        rates.append(json.loads(out)["peak_flops_per_s"] if proc.returncode == 0 else 0.0)
    return rates


def expected_gemm_rate():
    """The rate `local` expects of a float32 GEMM of n = 512: peak x gemm_max x n / (n + gemm_half_dim)."""
    with open(os.path.join(ROOT, "clusters", "local.toml"), "rb") as f:
        local = tomllib.load(f)
    eff = local["efficiency"]
    return local["device"]["peak_flops"]["float32"] * eff["gemm_max"] * 512 / (512 + eff["gemm_half_dim"])


def sim_measure_once(loom, path, sets, ranks, warmup, steps, trace=None):
    """A real run of `warmup` + `steps` steps on `ranks` ranks, one thread each: the timed steps'
    times and each stage's peak bytes (pp = 1: the largest rank's, every rank alike), how much
    other work the machine ran meanwhile (cores) and the slowest core's GEMM rate before and after."""
    quiet = wait_quiet(float(os.environ.get("BENCH_QUIET_WAIT", "30")))
    before = gemm_rates(loom)
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        launch = mpirun(ranks) if ranks > 1 else []
        busy, mine = cpu_busy_s(), children_cpu_s()
        rc, _, err, seconds = run_locked(launch + [loom, "train", "-c", path, "--quiet", "--metrics", metrics,
                                                   "--peak-flops", "1e11"] + (["--trace", trace] if trace else [])
                                         + set_args(sets + [f"train.steps={warmup + steps}"]), timeout=SIM_TIMEOUT_S)
        # Other work on the machine during the run: its busy CPU time less the run's own, in cores.
        others = round(max(0.0, (cpu_busy_s() - busy) - (children_cpu_s() - mine)) / max(seconds, 1e-9), 2)
        records = []
        if os.path.exists(metrics):
            with open(metrics) as f:
                records = [json.loads(line) for line in f]
    after = gemm_rates(loom)
    gemm = round(min(before + after) / 1e9, 1)
    if rc or len(records) < warmup + steps:
        return {"error": error_lines(err), "rc": rc, "steps_done": len(records), "others_cores_during": others,
                "gemm_gflops_min": gemm}
    last = records[-1]
    each = [r["step_ms"] / 1e3 for r in records[warmup:]]
    return {"step_s": statistics.median(each), "step_s_each": each,
            "peak_bytes_by_stage": last["peak_bytes_by_stage"] or [last["peak_bytes"]],
            "bubble": [r["bubble_fraction"] for r in records[warmup:]],
            "loss_last": last["loss"], "run_s": round(seconds, 1), "others_cores_before": quiet,
            "others_cores_during": others, "gemm_gflops_min": gemm,
            "gemm_gflops": [round(g / 1e9, 1) for g in before + after]}


def sim_measure(loom, path, sets, ranks, warmup, steps, deadline=None):
    """sim_measure_once, again (BENCH_RETRIES times at most, 1; none past `deadline`) while the run
    was disturbed: other work in this machine took more than a fifth of a core, or a core's GEMM rate
    before or after the run fell under BENCH_MIN_SPEED (0.8) of what `local` expects. Returns the
    fastest attempt."""
    floor = float(os.environ.get("BENCH_MIN_SPEED", "0.8")) * expected_gemm_rate() / 1e9
    attempts = []
    for _ in range(1 + int(os.environ.get("BENCH_RETRIES", "1"))):
        attempts.append(sim_measure_once(loom, path, sets, ranks, warmup, steps))
        a = attempts[-1]
        if "error" in a or (a["others_cores_during"] <= 0.2 and a["gemm_gflops_min"] >= floor):
            break
        if deadline and time.time() > deadline:
            break
    ok = [a for a in attempts if "error" not in a]
    best = min(ok, key=lambda a: a["step_s"]) if ok else attempts[-1]
    best["attempts"] = len(attempts)
    best["disturbed"] = best.get("others_cores_during", 0) > 0.2 or best.get("gemm_gflops_min", 0) < floor
    return best


def rel(predicted, measured):
    return (predicted - measured) / measured


def simulate_bench():
    """`simulate` (issue 17): every SIM_ROWS layout predicted by `loom simulate --cluster local --json`
    and measured by `loom train` at SIM_BATCH, one thread per rank, in BENCH_ROUNDS rounds (2) over all
    rows: each run BENCH_WARMUP warm-up steps (1), then BENCH_STEPS timed ones (3) whose median is the
    run's step. This host is shared and its cores slow down at times with nothing else running here,
    and noise only ever slows a run: the measured step is the fastest round's, the measured peak per
    stage the largest. Before each run the workload waits for the machine to be quiet; each core's
    GEMM rate is probed before and after it, and a run disturbed by other work (over a fifth of a core)
    or a slow core (under BENCH_MIN_SPEED = 0.8 of the rate `local` expects) is repeated, BENCH_RETRIES
    (1) time at most, and not once the workload has run BENCH_BUDGET_S (900). Errors are (predicted - measured) / measured. Rows with more ranks than cores run
    oversubscribed: their prediction is for a `local` of that many devices with each device's FLOP/s
    and memory bandwidth times cores / ranks (the ranks share the cores), beside the dedicated one (a
    core each); they are summarised apart. Then `loom plan --cluster local --gpus 2 --top 5` at the
    same batch: its top layout measured the same way against the fastest measured gpt-small 2-rank row
    (goal: within 10%). BENCH_ROWS=i,j,...[,plan] runs only those rows. One JSON line per row, a
    summary line and a markdown table. Run it under the build lock (flock FILE bench/run.sh simulate)."""
    warmup = int(os.environ.get("BENCH_WARMUP", "1"))
    steps = int(os.environ.get("BENCH_STEPS", "3"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "2"))
    only = [r for r in os.environ.get("BENCH_ROWS", "").split(",") if r]
    cores = os.cpu_count() or 1
    started = time.time()
    snapshot = tempfile.TemporaryDirectory()
    loom = os.path.join(snapshot.name, "loom")
    run_locked(["cp", "-p", LOOM, loom], timeout=60)  # a rebuild during the run must not mix two builds
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.split()
    global_batch, micro_batch = SIM_BATCH
    base = [f"train.global_batch={global_batch}", f"train.micro_batch={micro_batch}", "train.threads=1",
            "train.warmup=0"]
    with open(os.path.join(ROOT, "clusters", "local.toml"), "rb") as f:
        local = tomllib.load(f)
    print(json.dumps({"workload": "simulate", "measure": "binary", "commit": commit, "dirty": dirty[1::2],
                      "binary_mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(LOOM))),
                      "cores": cores, "global_batch": global_batch, "micro_batch": micro_batch,
                      "warmup_steps": warmup, "timed_steps": steps, "rounds": rounds,
                      "local_peak_gflops_float32": local["device"]["peak_flops"]["float32"] / 1e9}), flush=True)

    # Predictions first (cheap), then the measured rounds over all rows.
    cases = [(str(i), name, label, sets) for i, (name, label, sets) in enumerate(SIM_ROWS) if not only or str(i) in only]
    plan_label = None
    if not only or "plan" in only:
        path, _ = effective_config("gpt-small")
        chosen = os.path.join(snapshot.name, "plan.toml")
        out = subprocess.run([loom, "plan", "-c", path, "--cluster", "local", "--gpus", "2", "--top", "5",
                              "--out", chosen] + set_args(base), capture_output=True, text=True)
        print(out.stdout, end="", flush=True)
        if out.returncode:
            print(json.dumps({"workload": "simulate", "measure": "plan", "error": last_lines(out.stderr, 2)}), flush=True)
        else:
            with open(chosen, "rb") as f:
                cfg = tomllib.load(f)
            p, mem = cfg["parallel"], cfg["memory"]
            plan_label = (f"plan's top: dp{p['dp']} tp{p['tp']} pp{p['pp']} sp{p['sp']} mb{cfg['train']['micro_batch']} "
                          f"{p['schedule']}" + (f" {p['sp_mode']}" if p["sp"] > 1 else "")
                          + (f" chunks {p['chunks']}" if p["chunks"] > 1 else "")
                          + (f" zero{p['zero']}" if p["zero"] else "") + (" seq" if p["tp_sequence"] else "")
                          + (f" recompute {mem['recompute']}" if mem["recompute"] != "none" else "")
                          + (f" swap {mem['swap']}" if mem["swap"] != "none" else ""))
            # The written config holds the whole layout; the run's own keys (batch, threads) as every row's.
            keys = [f"parallel.{k}={p[k]}" for k in ("dp", "tp", "pp", "sp")]
            cases.append(("plan", chosen, plan_label, keys + [f"train.micro_batch={cfg['train']['micro_batch']}"]))

    rows = {}
    for key, name, label, sets in cases:
        path = name if key == "plan" else effective_config(name)[0]
        ranks = sim_ranks(sets)
        row = {"workload": "simulate", "measure": "row", "config": "gpt-small" if key == "plan" else name,
               "layout": label, "ranks": ranks, "oversubscribed": ranks > cores, "sets": sets}
        run_sets = base + sets
        if ranks > cores:
            pred, refusal = sim_predict(loom, path, run_sets, local_cluster(snapshot.name, ranks, cores / ranks), ranks)
            dedicated, _ = sim_predict(loom, path, run_sets, local_cluster(snapshot.name, ranks), ranks)
            row["predicted_dedicated_step_s"] = dedicated and dedicated["step_s"]
        else:
            pred, refusal = sim_predict(loom, path, run_sets, "local", ranks)
        if pred is None:
            row["refusal"] = refusal
        else:
            row.update(predicted_step_s=pred["step_s"], predicted_pipeline_s=pred["pipeline_s"],
                       predicted_gradient_tail_s=pred["gradient_tail_s"], predicted_optimizer_s=pred["optimizer_s"],
                       predicted_bubble=pred["bubble_fraction"],
                       predicted_peak_bytes_by_stage=pred["peak_bytes_by_stage"])
        rows[key] = (path, run_sets, row, [])
    # Retries stop once the workload has run BENCH_BUDGET_S (900): it holds the build lock meanwhile.
    deadline = started + float(os.environ.get("BENCH_BUDGET_S", "900"))
    for round_ in range(rounds):
        for key, (path, run_sets, row, runs) in rows.items():
            runs.append(sim_measure(loom, path, run_sets, row["ranks"], warmup, steps, deadline))
            print(json.dumps({"workload": "simulate", "measure": "run", "round": round_ + 1, "config": row["config"],
                              "layout": row["layout"], "predicted_step_s": row.get("predicted_step_s"), **runs[-1],
                              "elapsed_s": round(time.time() - started)}), flush=True)

    results = []
    for key, (path, run_sets, row, runs) in rows.items():
        ok = [r for r in runs if "error" not in r]
        if len(ok) < len(runs):
            row["run_errors"] = [r["error"] for r in runs if "error" in r]
        if ok:
            each = [t for r in ok for t in r["step_s_each"]]
            peaks = [max(stage) for stage in zip(*(r["peak_bytes_by_stage"] for r in ok))]
            fastest = min(ok, key=lambda r: r["step_s"])
            row.update(measured_step_s=fastest["step_s"], measured_round_step_s=[r["step_s"] for r in ok],
                       measured_step_s_each=each, measured_median_all_s=statistics.median(each),
                       measured_spread=[min(each), max(each)], measured_peak_bytes_by_stage=peaks,
                       measured_bubble=statistics.median(fastest["bubble"]),
                       loss_last=ok[-1]["loss_last"], run_s=[r["run_s"] for r in ok],
                       others_cores_during=fastest["others_cores_during"],
                       gemm_gflops_min=fastest["gemm_gflops_min"], gemm_gflops=fastest["gemm_gflops"],
                       attempts=[r["attempts"] for r in ok], disturbed=fastest["disturbed"])
            if "predicted_step_s" in row:
                row["step_error"] = rel(row["predicted_step_s"], row["measured_step_s"])
                if row.get("predicted_dedicated_step_s"):
                    row["dedicated_step_error"] = rel(row["predicted_dedicated_step_s"], row["measured_step_s"])
                row["peak_error_by_stage"] = [rel(p, m) for p, m in zip(row["predicted_peak_bytes_by_stage"], peaks)]
        print(json.dumps(row), flush=True)
        results.append((key, row))

    table_rows = [row for key, row in results if key != "plan"]
    plan_check = None
    if "plan" in rows:
        plan_row = rows["plan"][2]
        two = [r for r in table_rows if r["ranks"] == 2 and "measured_step_s" in r and r["config"] == "gpt-small"]
        best = min(two, key=lambda r: r["measured_step_s"]) if two else None
        plan_check = {"top_layout": plan_label, "top_predicted_step_s": plan_row.get("predicted_step_s"),
                      "top_measured_step_s": plan_row.get("measured_step_s"),
                      "best_measured_row": best and best["layout"],
                      "best_measured_step_s": best and best["measured_step_s"],
                      "best_predicted_step_s": best and best.get("predicted_step_s"),
                      "top_over_best": plan_row["measured_step_s"] / best["measured_step_s"]
                      if best and "measured_step_s" in plan_row else None, "goal_at_most": 1.10}

    def summary(selected, key):
        errors = [abs(r[key]) for r in selected if key in r]
        return {"rows": len(errors), "median_abs": statistics.median(errors) if errors else None,
                "max_abs": max(errors) if errors else None}

    def peak_errors(selected):
        errors = [abs(e) for r in selected for e in r.get("peak_error_by_stage", [])]
        return {"stages": len(errors), "median_abs": statistics.median(errors) if errors else None,
                "max_abs": max(errors) if errors else None}

    fitting = [r for r in table_rows if not r["oversubscribed"]]
    over = [r for r in table_rows if r["oversubscribed"]]
    print(json.dumps({"workload": "simulate", "measure": "summary",
                      "step_error": {"ranks_at_most_cores": summary(fitting, "step_error"),
                                     "oversubscribed_shared": summary(over, "step_error"),
                                     "oversubscribed_dedicated": summary(over, "dedicated_step_error")},
                      "peak_error": {"ranks_at_most_cores": peak_errors(fitting), "oversubscribed": peak_errors(over)},
                      "goals": {"median_abs_step_error": 0.10, "max_abs_step_error": 0.20},
                      "plan_check": plan_check, "elapsed_s": round(time.time() - started)}), flush=True)

    # The table (markdown), for docs/benchmarks.md.
    mib = lambda b: f"{b / 2**20:.0f}"
    pct = lambda e: f"{100 * e:+.1f}%"
    print("| config | layout | ranks | predicted s | measured s (each round) | error | predicted / measured peak "
          "MiB per stage | peak error | slowest core's GEMM GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in results:
        if "measured_step_s" not in r or "predicted_step_s" not in r:
            print(f"| {r['config']} | {r['layout']} | {r['ranks']} | {r.get('refusal') or ''} | "
                  f"{r.get('run_errors') or ''} | | | | |")
            continue
        peaks = " ; ".join(f"{mib(p)} / {mib(m)}" for p, m in zip(r["predicted_peak_bytes_by_stage"],
                                                                 r["measured_peak_bytes_by_stage"]))
        ranks = f"{r['ranks']} (over)" if r["oversubscribed"] else str(r["ranks"])
        predicted = f"{r['predicted_step_s']:.2f}"
        if r["oversubscribed"]:
            predicted += f" (dedicated {r['predicted_dedicated_step_s']:.2f})"
        rounds_s = ", ".join(f"{s:.2f}" for s in r["measured_round_step_s"])
        print(f"| {r['config']} | {r['layout']} | {ranks} | {predicted} | **{r['measured_step_s']:.2f}** ({rounds_s}) | "
              f"{pct(r['step_error'])} | {peaks} | {' '.join(pct(e) for e in r['peak_error_by_stage'])} | "
              f"{r['gemm_gflops_min']:.0f}{' (disturbed)' if r['disturbed'] else ''} |", flush=True)


# `simulate-layers` (issue 17's diagnosis): per layer, the simulator's pass times beside a real run's.
SIM_LAYER_ROWS = [
    ("single rank", []),
    ("dp2", ["parallel.dp=2"]),
    ("tp2", ["parallel.tp=2"]),
    ("pp2 1f1b", ["parallel.pp=2", "parallel.schedule=1f1b"]),
    ("sp2 allgather", ["parallel.sp=2", "parallel.sp_mode=allgather"]),
    ("sp2 ring", ["parallel.sp=2", "parallel.sp_mode=ring"]),
    ("sp2 ulysses", ["parallel.sp=2", "parallel.sp_mode=ulysses"]),
]


def simulated_layer_times(loom, path, sets, directory):
    """{layer name: (F, B, W) seconds} as `loom simulate` times them on `local`: the chain cut into one
    layer per pipeline stage (parallel.pp = layers, zero-bubble H1 so that B and W stand apart, on a
    `local` with enough devices), each stage's first F, B and W spans of its --trace."""
    plan = json.loads(subprocess.run([loom, "config", "-c", path, "--json"] + set_args(sets), check=True,
                                     capture_output=True, text=True).stdout)
    names = [l["name"] for s in plan["stages"] for l in s["layers"]]
    n = len(names)
    layer_sets = [s for s in sets if not s.startswith(("parallel.pp=", "parallel.schedule=", "parallel.chunks=",
                                                       "parallel.dp="))]
    layer_sets += [f"parallel.pp={n}", "parallel.schedule=zb-h1", f"train.global_batch={n}",
                   "parallel.pp_cuts=[" + ",".join(str(i) for i in range(1, n)) + "]"]
    ranks = sim_ranks(layer_sets)
    trace = os.path.join(directory, "simulated.json")
    pred, refusal = sim_predict(loom, path, layer_sets, local_cluster(directory, max(ranks, 2)), ranks, trace)
    if pred is None:
        sys.exit(f"loom: error: simulating one layer per stage failed: {refusal}")
    with open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    first = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "pipeline":
            op = e["name"].rstrip("0123456789")
            first.setdefault((e["pid"], op), e["dur"] / 1e6)
    pids = sorted({pid for pid, _ in first})
    return {name: tuple(first.get((pids[i], op), 0.0) for op in ("F", "B", "W")) for i, name in enumerate(names)}


def measured_layer_times(trace):
    """From a real run's --trace: per rank, {layer name: (F, B, W) seconds, each the median over the
    last step's micro-batches}, and per rank the last step's layer-busy and wall seconds."""
    with open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X"]
    passes = {"forward": 0, "backward_input": 1, "backward_weight": 2}
    out = {}
    for pid in sorted({e["pid"] for e in spans}):
        mine = sorted((e for e in spans if e["pid"] == pid), key=lambda e: e["ts"])
        ends = [e["ts"] + e["dur"] for e in mine if e.get("cat") == "optimizer" and e["name"] == "adamw"]
        start = ends[-2] if len(ends) >= 2 else 0
        last = [e for e in mine if e["ts"] >= start]
        times = {}
        for e in last:
            if e.get("cat") in passes:
                times.setdefault(e["name"], ([], [], []))[passes[e["cat"]]].append(e["dur"] / 1e6)
        busy = sum(e["dur"] for e in last if e.get("cat") in passes) / 1e6
        wall = (ends[-1] - start) / 1e6 if ends else None
        out[pid] = ({name: tuple(statistics.median(v) if v else 0.0 for v in t) for name, t in times.items()}, busy, wall)
    return out


def layer_kind(name):
    return name.split(".")[-1] if name.startswith("blocks.") else name


def simulate_layers():
    """`simulate-layers` (`simulate-layers:CONFIG`, default gpt-small): for each SIM_LAYER_ROWS layout at
    SIM_BATCH, the simulator's F, B and W time of every layer (simulated_layer_times) beside a real
    run's (1 warm-up step, then 1 traced step, one thread per rank; per layer the median over the
    micro-batches), summed by layer kind (embedding, attn, mlp, final_norm, head_loss) over one
    micro-batch's pass through each rank's layers; per rank the traced step's layer-busy time against
    its wall time (the rest: waits, optimizer, exchanges) and the simulator's layers x micro-batches."""
    name = "gpt-small"
    for workload in sys.argv[1:]:
        if workload.startswith("simulate-layers:"):
            name = workload.partition(":")[2]
    path, _ = effective_config(name)
    global_batch, micro_batch = SIM_BATCH
    base = [f"train.global_batch={global_batch}", f"train.micro_batch={micro_batch}", "train.threads=1",
            "train.warmup=0"]
    snapshot = tempfile.TemporaryDirectory()
    loom = os.path.join(snapshot.name, "loom")
    run_locked(["cp", "-p", LOOM, loom], timeout=60)
    only = [r for r in os.environ.get("BENCH_ROWS", "").split(",") if r]
    for i, (label, sets) in enumerate(SIM_LAYER_ROWS):
        if only and str(i) not in only:
            continue
        simulated = simulated_layer_times(loom, path, base + sets, snapshot.name)
        trace = os.path.join(snapshot.name, "run.json")
        floor = float(os.environ.get("BENCH_MIN_SPEED", "0.8")) * expected_gemm_rate() / 1e9
        for attempt in range(1 + int(os.environ.get("BENCH_RETRIES", "1"))):  # the last run's trace is read
            run = sim_measure_once(loom, path, base + sets, sim_ranks(sets), 1, 1, trace=trace)
            if "error" in run or (run["others_cores_during"] <= 0.2 and run["gemm_gflops_min"] >= floor):
                break
        if "error" in run:
            print(json.dumps({"workload": "simulate-layers", "layout": label, "error": run["error"]}), flush=True)
            continue
        measured = measured_layer_times(trace)
        dp = int(dict(s.split("=", 1) for s in sets).get("parallel.dp", 1))
        microbatches = global_batch // micro_batch // dp
        ranks = {}
        for rank, (times, busy, wall) in measured.items():
            kinds = {}
            for layer, (f, b, w) in times.items():
                sf, sb, sw = simulated.get(layer, (0.0, 0.0, 0.0))
                k = kinds.setdefault(layer_kind(layer), {"layers": 0, "measured_ms": [0.0, 0.0, 0.0],
                                                         "simulated_ms": [0.0, 0.0, 0.0]})
                k["layers"] += 1
                for j, (m, s) in enumerate(zip((f, b, w), (sf, sb, sw))):
                    k["measured_ms"][j] += m * 1e3
                    k["simulated_ms"][j] += s * 1e3
            for k in kinds.values():
                k["measured_ms"] = [round(v, 2) for v in k["measured_ms"]]
                k["simulated_ms"] = [round(v, 2) for v in k["simulated_ms"]]
                k["simulated_over_measured"] = [round(s / m, 3) if m > 0 else None
                                                for s, m in zip(k["simulated_ms"], k["measured_ms"])]
            sim_busy = sum(sum(simulated.get(layer, (0, 0, 0))) for layer in times) * microbatches
            ranks[rank] = {"by_kind": kinds, "layers_busy_s": round(busy, 3), "step_wall_s": wall and round(wall, 3),
                           "simulated_layers_busy_s": round(sim_busy, 3)}
        print(json.dumps({"workload": "simulate-layers", "config": name, "layout": label, "sets": sets,
                          "microbatches_per_rank": microbatches, "step_s": run["step_s_each"][-1],
                          "attempts": attempt + 1,
                          "others_cores_during": run["others_cores_during"],
                          "gemm_gflops": run["gemm_gflops"], "ranks": ranks}), flush=True)
        for rank, r in ranks.items():
            print(f"  {label} rank {rank}: layers busy {r['layers_busy_s']:.2f} s (simulated {r['simulated_layers_busy_s']:.2f}) "
                  f"of step {r['step_wall_s']:.2f} s", flush=True)
            for kind, k in r["by_kind"].items():
                print(f"    {kind:<11} x{k['layers']}: F B W measured " + " ".join(f"{v:7.2f}" for v in k["measured_ms"])
                      + " ms, simulated " + " ".join(f"{v:7.2f}" for v in k["simulated_ms"]) + " ms, ratio "
                      + " ".join(f"{v}" for v in k["simulated_over_measured"]), flush=True)


def allreduce():
    out = subprocess.run(mpirun(2) + [os.path.join(ROOT, "build", "bin", "loom_bench_allreduce")], check=True,
                         capture_output=True, text=True)
    for line in out.stdout.strip().splitlines():
        print(line, flush=True)


def main():
    workloads = sys.argv[1:] or ["gpt-tiny", "gpt-tiny@dp2"]
    steps = int(os.environ.get("BENCH_STEPS", "8"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    threads = int(os.environ.get("THREADS", str(os.cpu_count() or 1)))
    peaks = {}  # GEMM peak of one rank's threads: MFU is per rank against its own cores
    for workload in workloads:
        if workload in ("long-sequences", "gpt-long"):
            degrees = {"sp": 2}
        elif workload == "pipelines":
            degrees = {"pp": 2}
        elif workload in VARIANTS:
            degrees = VARIANTS[workload][1]
        elif workload in SPARSE:
            degrees = {"dp": 2}
        elif workload.startswith("sparse-choice"):
            degrees = {"dp": 2}
        else:
            degrees = parse_layout(workload.partition("@")[2])[0]
        rank_threads = max(1, threads // (degrees.get("dp", 1) * degrees.get("tp", 1) * degrees.get("pp", 1)
                                          * degrees.get("sp", 1)))
        if workload.split(":")[0] not in ("torch2", "allreduce", "hosts", "checkpoint", "memory", "simulate", "simulate-layers") and rank_threads not in peaks:
            peaks[rank_threads] = gemm_peak(rank_threads)
        peak = peaks.get(rank_threads)
        if workload.split(":")[0] == "torch2":
            torch2(steps, rounds, threads, workload.partition(":")[2] or None)
        elif workload == "allreduce":
            allreduce()
        elif workload == "hosts":
            from hosts import hosts_bench  # noqa: E402: its own file, needs root (the test cluster)
            hosts_bench(steps)
        elif workload == "simulate":
            simulate_bench()
        elif workload.split(":")[0] == "simulate-layers":
            simulate_layers()
        elif workload == "memory" or workload.startswith("memory:"):
            memory(workload.partition(":")[2] or None)
        elif workload == "checkpoint":
            checkpoint(threads, rounds)
        elif workload == "pipelines":
            pipelines(steps, threads, peak)
        elif workload in ("long-sequences", "gpt-long"):
            long_sequences(threads)
        elif workload in VARIANTS:
            print(json.dumps(compare(workload, steps, rounds, threads, peak)), flush=True)
        elif workload.startswith("versus:"):
            print(json.dumps(versus(workload, steps, rounds, threads, peak)), flush=True)
        elif workload in SPARSE:
            sparse(workload, steps, rounds, threads, peak)
        elif workload.startswith("sparse-choice"):
            sparse_choice(steps, rounds, threads, peak, workload.partition(":")[2] or None)
        elif workload.partition("@")[0].endswith("-bf16"):
            print(json.dumps(bf16(workload, steps, rounds, threads, peak)), flush=True)
        else:
            print(json.dumps(bench(workload, steps, rounds, threads, peak)), flush=True)


if __name__ == "__main__":
    main()

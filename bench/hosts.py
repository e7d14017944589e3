"""`hosts` (issue 40, docs/multi-host.md): loom on 2 hosts x 2 ranks of the test cluster
(scripts/netns-cluster.sh; needs root), each host's link shaped to BENCH_RATE (1gbit) and delayed
BENCH_DELAY (1ms one way: NOTE [Delay line]; "0" for none). Prints JSON lines:
  allreduce  loom_bench_allreduce's bus bandwidth per size: loom's all-reduce (hierarchical across
             hosts, NOTE [Hierarchical all-reduce]; blocking, and non-blocking as gradient buckets
             run it) against Open MPI's flat ring (coll/tuned,
             algorithm 4) on the same buffers, same run; and whether Open MPI's own hierarchical
             component (coll/han) runs;
  profile    `loom profile --cluster-out` of gpt-small across the hosts: the cluster file;
  layout     gpt-small (run.py's SIM_BATCH) at dp4, dp2 x tp2 and dp2 x pp2 (1f1b): the median
             measured step against `loom simulate` on that cluster file;
  plan       `loom plan`'s first choice for 4 ranks on that file, measured, against the fastest
             of the three.
The 4 ranks share this machine's cores: each has one thread, and with 2 cores they run 2 to a
core, as the profile measured them (every rank measures at once), and beside them the delay lines
carry the links' frames.
"""
import json
import os
import statistics
import subprocess
import tempfile

from run import LOOM, ROOT, SCHEDULES, SIM_BATCH, WARMUP, effective_config, set_args, sim_predict

CLUSTER = os.path.join(ROOT, "scripts", "netns-cluster.sh")
LAYOUTS = {
    "dp4": ["parallel.dp=4"],
    "dp2 tp2": ["parallel.dp=2", "parallel.tp=2"],
    "dp2 pp2 1f1b": ["parallel.dp=2", "parallel.pp=2"] + SCHEDULES["1f1b"],
}
# A subnet of its own: the netns tests' clusters use 10.71 and 10.73 to 10.77, the demo 10.78.
ENV = dict(os.environ, LOOM_CLUSTER="loomb", LOOM_CLUSTER_SUBNET="10.72.0",
           LOOM_CLUSTER_DIR="/tmp/loom-cluster-loomb")


def is_number(word):
    try:
        float(word)
        return True
    except ValueError:
        return False


def on_cluster(args, **kw):
    return subprocess.run([CLUSTER, "mpirun", "-np", "4", "-x", "OMP_NUM_THREADS=1"] + args, env=ENV, text=True, **kw)


def allreduce():
    """loom's all-reduce (hierarchical across hosts) against Open MPI's flat ring on the same buffers,
    same run; then whether Open MPI's hierarchical component (coll/han) runs at all."""
    flat = ["--mca", "coll", "^han", "--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]
    # Gradient-sized messages, 1 to 64 MiB (small ones are all latency, which 2 shared cores blur).
    binary = [os.path.join(ROOT, "build", "bin", "loom_bench_allreduce"), str(1 << 20), str(64 << 20)]
    out = on_cluster(flat + binary, capture_output=True, check=True)
    for r in (json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")):
        print(json.dumps({"workload": "hosts", "measure": "allreduce", "bytes": r["bytes"],
                          "loom_hierarchical_busbw_GBps": r["loom_busbw_GBps"],
                          "loom_hierarchical_async_busbw_GBps": r["loom_async_busbw_GBps"],
                          "flat_ring_busbw_GBps": r["mpi_busbw_GBps"],
                          "hierarchical_vs_ring": r["loom_busbw_GBps"] / r["mpi_busbw_GBps"]}), flush=True)
    try:
        han = on_cluster(["--mca", "coll_han_priority", "100"] + binary[:1] + [str(16 << 20), str(16 << 20)],
                         capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        han = subprocess.CompletedProcess([], returncode=124, stdout="")
    print(json.dumps({"workload": "hosts", "measure": "han", "exit_code": han.returncode,
                      "crashed": han.returncode != 0, "stdout": han.stdout.strip().splitlines()[-1:]}), flush=True)


def measure(path, sets, steps):
    """The median step time (s) of `steps` steps after the warm-up, on the cluster's 4 ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        on_cluster([LOOM, "train", "-c", path, "--quiet", "--metrics", metrics]
                   + set_args(sets + [f"train.steps={steps + WARMUP}", "train.threads=1"]), check=True, cwd=tmp)
        with open(metrics) as f:
            records = [json.loads(line) for line in f][WARMUP:]
    return statistics.median(r["step_ms"] for r in records) / 1e3


def layouts(steps):
    path, _ = effective_config("gpt-small")
    batch = [f"train.global_batch={SIM_BATCH[0]}", f"train.micro_batch={SIM_BATCH[1]}"]
    with tempfile.TemporaryDirectory() as tmp:
        cluster = os.path.join(tmp, "hosts.toml")
        on_cluster([LOOM, "profile", "-c", path, "--cluster-out", cluster] + set_args(batch), check=True,
                   capture_output=True)
        with open(cluster) as f:
            links = [line.strip() for line in f if line.startswith(("source", "intra_node", "inter_node"))]
        print(json.dumps({"workload": "hosts", "measure": "profile", "cluster": links}), flush=True)
        measured = {}
        for name, sets in LAYOUTS.items():
            predicted, refusal = sim_predict(LOOM, path, batch + sets, cluster, 4)
            measured[name] = measure(path, batch + sets, steps)
            print(json.dumps({"workload": "hosts", "measure": "layout", "layout": name, "measured_step_s": measured[name],
                              "predicted_step_s": predicted and predicted["step_s"], "refusal": refusal,
                              "measured_vs_predicted": predicted and measured[name] / predicted["step_s"]}), flush=True)
        chosen = os.path.join(tmp, "plan.toml")
        out = subprocess.run([LOOM, "plan", "-c", path, "--cluster", cluster, "--gpus", "4", "--out", chosen]
                             + set_args(batch), capture_output=True, text=True, check=True)
        row = next(line.split()[1:] for line in out.stdout.splitlines() if line.split()[:1] == ["1"])
        top = row[:next(i for i, word in enumerate(row) if is_number(word))]  # the layout, up to "step s"
        step = measure(chosen, ["train.threads=1"], steps)
        best = min(measured, key=measured.get)
        print(json.dumps({"workload": "hosts", "measure": "plan", "chosen": " ".join(top), "chosen_step_s": step,
                          "best_of_three": best, "best_step_s": measured[best],
                          "chosen_vs_best": step / measured[best]}), flush=True)


def cluster_up():
    """The bench's cluster: 2 hosts x 2 slots, links shaped to BENCH_RATE and delayed BENCH_DELAY."""
    rate, delay = os.environ.get("BENCH_RATE", "1gbit"), os.environ.get("BENCH_DELAY", "1ms")
    shape = ["--rate", rate] + (["--delay", delay] if delay != "0" else [])
    up = subprocess.run([CLUSTER, "up", "2", "--slots", "2"] + shape, env=ENV, capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"bench/hosts.py: the test cluster did not come up: {up.stderr.strip()}")
    return rate, delay


def hosts_bench(steps):
    rate, delay = cluster_up()
    try:
        print(json.dumps({"workload": "hosts", "measure": "cluster", "hosts": 2, "ranks_per_host": 2, "rate": rate,
                          "delay": delay, "cores": os.cpu_count()}), flush=True)
        allreduce()
        layouts(steps)
    finally:
        subprocess.run([CLUSTER, "down"], env=ENV)

#!/usr/bin/env bash
# profile.sh LOOM SOURCE_DIR CASE [MPIEXEC...]: `loom profile` from the command line (NOTE [Profile],
# docs/profile.md). The cases that need 2 ranks get the launcher as MPIEXEC... (run as
# `MPIEXEC... -n 2 LOOM ...`).
#   serial     one process: the file has every chain layer (the names `loom config --json` lists),
#              in order, with positive times and bytes, the copy bandwidths, no collectives; the
#              table names every layer; reading the file back through the format's checks is the
#              unit tests' job
#   ranks2     2 ranks: the collectives of 2 ranks (all_reduce, all_gather, reduce_scatter,
#              all_to_all, send_recv) with alpha > 0 and beta > 0; parallel.tp = 2 measured by both
#              ranks together gives the tp chain's layers; --cluster-out beside --out writes this
#              machine as a cluster (NOTE [Cluster cost model]) that `loom simulate` reads, with
#              2 devices on 1 node, positive peaks, efficiencies in (0, 1], the send_recv as links and
#              [measured] (2 ranks, 1 thread: train.threads, a time, the loom version)
#   bad_input  --out or --cluster-out over the config or the data file, --out and --cluster-out on
#              one file, a config error, tp = 2 on one rank, --cluster-out on one rank, --repeats 0,
#              --out in a missing directory: exit 2, one `loom: error:` line, nothing written, the
#              input files unchanged
# No timing decides a result: the times are checked positive, never compared.
set -u -o pipefail
loom=$1 src=$2 case=$3
shift 3
mpi=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -s $f ] && { echo "--- $f"; tail -8 $f; }; done; exit 1; }
# gpt-tiny at small shapes: a profile of a few seconds.
tiny=(-c "$src/configs/gpt-tiny.toml" --set model.n_layers=2 --set model.d_model=32 --set model.seq_len=32
      --set model.vocab=256 --set train.threads=1)

# check_file FILE RANKS [SET...]: the profile's layers are the chain's of the config with SET...,
# every number positive (bytes not negative), and collectives of RANKS ranks (none when 1).
check_file() {
  local file=$1 ranks=$2
  shift 2
  "$loom" config --json "${tiny[@]}" "$@" >plan.json || fail "loom config --json"
  python3 - "$file" plan.json "$ranks" <<'EOF' || fail "$file does not hold what it should"
import json, sys
p = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
ranks = int(sys.argv[3])
chain = [l["name"] for l in plan["stages"][0]["layers"]]
assert p["format"] == "loom-profile" and p["version"] == 1, (p["format"], p["version"])
assert p["identity"]["model.d_model"] == "32" and p["identity"]["model.n_layers"] == "2", p["identity"]
names = [l["name"] for l in p["layers"]]
assert names == chain, (names, chain)
for l in p["layers"]:
    for key in ("forward_s", "backward_input_s", "backward_weight_s"):
        assert l[key] > 0, (l["name"], key, l[key])
    assert l["param_bytes"] >= 0 and l["saved_bytes"] > 0, l
assert p["copy"]["device_to_host_bytes_per_s"] > 0 and p["copy"]["host_to_device_bytes_per_s"] > 0
ops = sorted(c["op"] for c in p["collectives"] if c["ranks"] == 2)
want = [] if ranks == 1 else ["all_gather", "all_reduce", "all_to_all", "reduce_scatter", "send_recv"]
assert ops == want, (ops, want)
for c in p["collectives"]:
    assert c["alpha_s"] > 0 and c["beta_s_per_byte"] > 0, c
EOF
}

# check_cluster FILE: --cluster-out's file as loom reads it (`loom simulate` on it) and as NOTE
# [Cluster cost model] says: this host's 2 ranks, measured numbers in range, the links its send_recv.
check_cluster() {
  local file=$1
  "$loom" simulate "${tiny[@]}" --set parallel.dp=2 --cluster "$file" --gpus 2 --json >sim.json ||
    fail "loom simulate does not read $file"
  python3 - "$file" sim.json <<'EOF' || fail "$file does not hold what it should"
import json, sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
sim = json.load(open(sys.argv[2]))
assert open(sys.argv[1]).readline().startswith("# This machine, written by `loom profile --cluster-out`")
assert c["name"] == "local" and "loom profile --cluster-out" in c["source"], (c["name"], c["source"])
d = c["device"]
assert d["per_node"] == 2 and d["max_nodes"] == 1, d
assert d["memory_bytes"] > 0 and d["memory_bandwidth"] > 0, d
assert {"float32", "float64"} <= set(d["peak_flops"]) and min(d["peak_flops"].values()) > 0, d
e = c["efficiency"]
for key in ("gemm_max", "attention", "memory"):
    assert 0 < e[key] <= 1, (key, e[key])
assert e["gemm_half_dim"] >= 0, e
assert 0 <= e["overlap"] <= 1, e  # NOTE [Overlap]: measured on the 2 ranks
links = c["links"]
send_recv = [m for m in c["collective"] if m["op"] == "send_recv"]
assert len(send_recv) == 1, c["collective"]
assert links["intra_node"] == links["inter_node"], links
assert abs(links["intra_node"]["latency"] / send_recv[0]["alpha_s"] - 1) < 1e-5, (links, send_recv)
# NOTE [Kernel fusion]: this machine's file prices its own kernels, as its attention share was measured.
assert d["kind"] == "cpu" and c["kernels"] == {"attention": "unfused", "elementwise": "unfused"}, (d, c["kernels"])
m = c["measured"]  # NOTE [Cached cluster]: when and how
assert m["ranks"] == 2 and m["threads"] == 1 and m["unix_time"] > 1.7e9 and m["loom"] and m["peak_spread"] >= 0, m
assert abs(links["intra_node"]["bandwidth"] * send_recv[0]["beta_s_per_byte"] - 1) < 1e-5, (links, send_recv)
assert links["host"] > 0, links
assert sorted(m["op"] for m in c["collective"]) == ["all_gather", "all_reduce", "all_to_all", "reduce_scatter",
                                                   "send_recv"], c["collective"]
assert sim["cluster"] == "local" and sim["step_s"] > 0, sim
EOF
}

case $case in
serial)
  "$loom" profile "${tiny[@]}" --repeats 2 --out p.json >out.txt 2>err.txt || fail "loom profile exited $?"
  check_file p.json 1
  for layer in embedding blocks.0.attn blocks.1.mlp; do
    grep -q "^$layer " out.txt || fail "the table lacks $layer"
  done
  grep -q '^copy: device -> host .* GB/s' out.txt || fail "no copy line"
  grep -q "^wrote p.json" out.txt || fail "no 'wrote' line"
  [ ! -s err.txt ] || fail "stderr is not empty"
  [ -z "$(ls -A | grep loom-partial)" ] || fail "a temporary was left"
  ;;
ranks2)
  timeout -k 5 120 "${mpi[@]}" -n 2 "$loom" profile "${tiny[@]}" --repeats 2 --out p2.json --cluster-out c.toml \
    >out.txt 2>err.txt || fail "loom profile on 2 ranks exited $?"
  check_file p2.json 2
  grep -q '^all_reduce .* 2 ranks: alpha' out.txt || fail "the table lacks the collectives"
  grep -q '^cluster local: 2 devices; peak GFLOP/s float32' out.txt || fail "the table lacks the cluster line"
  grep -q "^wrote c.toml" out.txt || fail "no 'wrote c.toml' line"
  check_cluster c.toml
  timeout -k 5 120 "${mpi[@]}" -n 2 "$loom" profile "${tiny[@]}" --set parallel.tp=2 --repeats 2 --out tp2.json \
    >out.txt 2>err.txt || fail "loom profile with tp = 2 on 2 ranks exited $?"
  check_file tp2.json 2 --set parallel.tp=2
  python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["identity"]["parallel.tp"] == "2"' tp2.json ||
    fail "tp2.json does not record parallel.tp = 2"
  ;;
bad_input)
  cp "$src/configs/gpt-tiny.toml" config.toml
  for i in $(seq 40); do cat "$src/README.md"; done >text.txt
  sum=$(cat config.toml text.txt | md5sum)
  refused() {  # refused PATTERN ARGS...: exit 2, one error line with PATTERN, nothing on stdout
    local pattern=$1
    shift
    "$loom" profile "$@" >out.txt 2>err.txt
    local rc=$?
    [ $rc -eq 2 ] || fail "exit code $rc for $*, want 2"
    [ ! -s out.txt ] || fail "stdout is not empty for $*"
    [ "$(wc -l <err.txt)" -eq 1 ] && grep -q '^loom: error: ' err.txt || fail "not one 'loom: error:' line for $*"
    grep -qF -- "$pattern" err.txt || fail "the error lacks '$pattern'"
  }
  refused "is the same file as the config file" -c config.toml --out config.toml
  refused "the data file (data.source)" -c config.toml --set data.source=text:text.txt --out text.txt
  refused "--cluster-out 'config.toml' is the same file as the config file" -c config.toml --cluster-out config.toml
  refused "the data file (data.source)" -c config.toml --set data.source=text:text.txt --cluster-out text.txt
  refused "--out 'c.toml' and --cluster-out 'c.toml' are the same file" -c config.toml --out c.toml --cluster-out c.toml
  refused "--cluster-out on CPUs needs 2 ranks or more (its links are their send_recv), but the job has 1" \
    -c config.toml --cluster-out c.toml
  refused "did you mean 'model.d_model'" -c config.toml --set model.d_modle=3 --out p.json
  refused "model.n_heads" -c config.toml --set model.n_heads=5 --out p.json
  refused "parallel.tp (2) x parallel.sp (1) = 2 ranks measure the layers together, but the job has 1" \
    -c config.toml --set parallel.tp=2 --out p.json
  refused "--repeats 0 must be between 1 and 1000" -c config.toml --repeats 0 --out p.json
  refused "the directory '/nonexistent' does not exist" -c config.toml --out /nonexistent/p.json
  [ "$(cat config.toml text.txt | md5sum)" = "$sum" ] || fail "an input file changed"
  [ "$(ls -A | sort | tr '\n' ' ')" = "config.toml err.txt out.txt text.txt " ] || fail "files were written: $(ls -A)"
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: loom profile $case"

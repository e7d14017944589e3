#!/usr/bin/env bash
# planner.sh LOOM SOURCE_DIR CASE: `loom simulate` and `loom plan` from the command line (NOTE [Step
# simulator], NOTE [Layout planner], docs/planner.md).
#   bad_input      an unknown cluster name; a cluster file that is not TOML, has an unknown key or a
#                  negative bandwidth; more GPUs than the cluster has; a layout whose dp x tp x pp x sp
#                  is not --gpus; a config no layout fits (the error names the least memory needed);
#                  --keep with an unknown key; --trace or --out onto the config file: each exit 2, one
#                  `loom: error:` line, nothing on stdout, no output written, the config unchanged
#   other_profile  memory.profile measured for another model (tests/data/profile_other.json): refused
#                  by both commands as `loom train` refuses it
#   outputs        simulate --json prints one JSON object with the prediction's keys; --trace writes a
#                  Chrome trace of "X" events with pid and tid; plan --out writes a config that
#                  `loom config --check` and `--print` accept, with the layout the table ranks first
# No prediction's value is compared: the cost model's numbers are the unit tests' and docs' business.
set -u -o pipefail
loom=$1 src=$2 case=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -s $f ] && { echo "--- $f"; tail -8 $f; }; done; exit 1; }
cp "$src/configs/gpt-small.toml" config.toml
small=(-c config.toml)
a100=(--cluster dgx-a100-80gb)

# refused PATTERN ARGS...: `loom ARGS...` exits 2 with one `loom: error:` line holding PATTERN and
# prints nothing on stdout.
refused() {
  local pattern=$1
  shift
  "$loom" "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "exit code $rc for $*, want 2"
  [ ! -s out.txt ] || fail "stdout is not empty for $*"
  [ "$(wc -l <err.txt)" -eq 1 ] && grep -q '^loom: error: ' err.txt || fail "not one 'loom: error:' line for $*"
  grep -qE -- "$pattern" err.txt || fail "the error of $* lacks /$pattern/"
}

# Both commands refuse the same input: simulate with --trace, plan with --out, neither written.
both_refuse() {
  local pattern=$1
  shift
  refused "$pattern" simulate "$@" --trace t.json
  refused "$pattern" plan "$@" --out o.toml
}

case $case in
bad_input)
  sum=$(md5sum <config.toml)
  both_refuse "no cluster file nosuch \(looked for clusters/nosuch.toml" "${small[@]}" --cluster nosuch --gpus 1
  printf 'name = "broken"\n[device\n' >broken.toml
  both_refuse "broken.toml: not a cluster file" "${small[@]}" --cluster ./broken.toml --gpus 1
  { echo 'bogus = 3'; cat "$src/clusters/dgx-a100-80gb.toml"; } >unknown.toml
  both_refuse "unknown.toml: unknown key bogus" "${small[@]}" --cluster ./unknown.toml --gpus 1
  sed 's/^intra_node = { bandwidth = 300e9/intra_node = { bandwidth = -300e9/' \
    "$src/clusters/dgx-a100-80gb.toml" >negative.toml
  both_refuse "negative.toml: links.intra_node.bandwidth = -[0-9.e+]+ must be a positive number" \
    "${small[@]}" --cluster ./negative.toml --gpus 1
  # clusters/local.toml is this machine: one node (max_nodes = 1).
  both_refuse "--gpus 64 is more than cluster local has \(1 nodes x " "${small[@]}" --cluster local --gpus 64
  refused "parallel.dp x tp x pp x sp = 2 x 1 x 1 x 1 = 2 ranks, but --gpus 4; hint: --gpus 2" \
    simulate "${small[@]}" "${a100[@]}" --gpus 4 --set parallel.dp=2 --trace t.json
  # No layout fits one A100: a 131072-token sequence's activations (the weights fit), then a model
  # whose weights alone do not.
  refused "no layout of gpt on 1 x dgx-a100-80gb fits its 80.00 GiB per device: the smallest needs [0-9.]+ GiB" \
    plan "${small[@]}" "${a100[@]}" --gpus 1 --set model.d_model=2048 --set model.n_layers=24 \
    --set model.n_heads=16 --set model.seq_len=131072 --set train.global_batch=1 --set train.micro_batch=1 --out o.toml
  refused "no layout of gpt on 1 x dgx-a100-80gb fits .* needs" plan "${small[@]}" "${a100[@]}" --gpus 1 \
    --set model.d_model=16384 --set model.n_layers=64 --set model.n_heads=128 --out o.toml
  refused "--keep bogus is not a layout key; hint: one of dp, tp" plan "${small[@]}" "${a100[@]}" --gpus 1 \
    --keep dp,bogus --out o.toml
  refused "--trace 'config.toml' is the same file as the config file" simulate "${small[@]}" "${a100[@]}" --gpus 1 \
    --trace config.toml
  refused "--out 'config.toml' is the same file as the config file" plan "${small[@]}" "${a100[@]}" --gpus 1 \
    --out config.toml
  [ "$(md5sum <config.toml)" = "$sum" ] || fail "config.toml changed"
  written=$(ls -A | grep -vxE 'config.toml|out.txt|err.txt|broken.toml|unknown.toml|negative.toml')
  [ -z "$written" ] || fail "files were written: $written"
  ;;
other_profile)
  both_refuse "profile_other.json was measured for another model: model.d_model = 64 in the profile, 512 in the run" \
    "${small[@]}" "${a100[@]}" --gpus 1 --set memory.profile="$src/tests/data/profile_other.json"
  [ -z "$(ls -A | grep -vxE 'config.toml|out.txt|err.txt')" ] || fail "files were written: $(ls -A)"
  ;;
outputs)
  "$loom" simulate "${small[@]}" "${a100[@]}" --gpus 1 --json >out.txt 2>err.txt || fail "loom simulate --json exited $?"
  [ "$(wc -l <out.txt)" -eq 1 ] || fail "--json printed $(wc -l <out.txt) lines, want one object"
  python3 - out.txt <<'EOF' || fail "--json's object lacks what it should hold"
import json, sys
p = json.load(open(sys.argv[1]))
for key in ("step_s", "tokens_per_s", "model_tflops_per_device", "mfu", "bubble_fraction"):
    assert isinstance(p[key], (int, float)) and p[key] >= 0, (key, p.get(key))
assert p["step_s"] > 0 and p["tokens_per_s"] > 0 and 0 < p["mfu"] <= 1, p
stages = p["peak_bytes_by_stage"]
assert isinstance(stages, list) and len(stages) == 1 and stages[0] > 0, stages
assert p["fits"] is True, p["fits"]
EOF
  "$loom" simulate "${small[@]}" "${a100[@]}" --gpus 2 --set parallel.pp=2 --trace trace.json >out.txt 2>err.txt ||
    fail "loom simulate --trace exited $?"
  python3 - trace.json <<'EOF' || fail "trace.json is not a trace of the predicted step"
import json, sys
t = json.load(open(sys.argv[1]))
events = t["traceEvents"] if isinstance(t, dict) else t
spans = [e for e in events if e.get("ph") == "X"]
assert spans, "no X events"
for e in spans:
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    assert e["dur"] >= 0 and e["ts"] >= 0 and e["name"], e
assert len({e["pid"] for e in spans}) == 2, sorted({e["pid"] for e in spans})  # one process per stage
EOF
  "$loom" plan "${small[@]}" "${a100[@]}" --gpus 8 --top 3 --out best.toml >out.txt 2>err.txt ||
    fail "loom plan --out exited $?"
  grep -q "^wrote best.toml" out.txt || fail "no 'wrote best.toml' line"
  [ ! -s err.txt ] || fail "stderr is not empty"
  "$loom" config -c best.toml --check >check.txt 2>err.txt || fail "loom config --check refused best.toml"
  grep -q "^loom: config ok for 8 ranks" check.txt || fail "best.toml is not a layout of 8 ranks"
  "$loom" config -c best.toml --print >print.txt 2>err.txt || fail "loom config --print refused best.toml"
  # The table's first row is the layout written: "1 dpD tpT ppP spS mbM ...".
  python3 - out.txt best.toml <<'EOF' || fail "best.toml does not hold the table's first layout"
import re, sys, tomllib
row = next(l for l in open(sys.argv[1]) if re.match(r"\s+1 dp", l))
d, t, p, s, m = map(int, re.search(r"dp(\d+) tp(\d+) pp(\d+) sp(\d+) mb(\d+)", row).groups())
c = tomllib.load(open(sys.argv[2], "rb"))
got = (c["parallel"]["dp"], c["parallel"]["tp"], c["parallel"]["pp"], c["parallel"]["sp"], c["train"]["micro_batch"])
assert got == (d, t, p, s, m), (got, row)
assert c["model"]["d_model"] == 512 and c["train"]["global_batch"] == 16, c
EOF
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: loom simulate / plan $case"

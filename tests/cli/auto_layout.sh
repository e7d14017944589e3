#!/usr/bin/env bash
# auto_layout.sh LOOM SOURCE_DIR MPIEXEC...: `loom train` with parallel.auto = true (NOTE [parallel.auto]
# in src/loom/train/auto_layout.h), XDG_CACHE_HOME in a temporary directory:
#   2 ranks, no cache   every rank measures this machine; the line says it was measured and cached
#                       where, the file is there (this machine as the `local` cluster of 2 devices),
#                       the chosen layout's line names a layout of 2 ranks and a predicted step, and
#                       the run trains to its end
#   2 ranks, cached     the line says it planned on the cache; the file is left as it was; a model
#                       no layout fits, then a malformed cache: rank 0 refuses, both ranks end, exit 2,
#                       one `loom: error:` line
#   2 ranks, old cache  measured at 0 s after 1970 (NOTE [Cached cluster]): a warning saying it is
#                       stale, the machine measured again, and the new cache records this hour
#   1 rank, no cache    one rank cannot measure links: it plans on the shipped clusters/local.toml,
#                       says so, writes no cache and trains
# The layout chosen is not checked: it is the planner's to choose (and the tests' of `loom plan`).
set -u -o pipefail
loom=$1 src=$2
shift 2
mpi=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -s $f ] && { echo "--- $f"; tail -8 $f; }; done; exit 1; }
export XDG_CACHE_HOME=$dir/cache
cache=$XDG_CACHE_HOME/loom/local-cluster.toml
train=(train -c "$src/configs/gpt-tiny.toml" --set parallel.auto=true --set train.steps=2 --set train.warmup=0)
on2() { timeout -k 5 240 "${mpi[@]}" -n 2 -x XDG_CACHE_HOME "$loom" "${train[@]}" >out.txt 2>err.txt; }

# chose RANKS: the layout line names dp x tp x pp x sp = RANKS and a predicted step time, and the
# run printed its last step.
chose() {
  local line
  line=$(grep '^loom: parallel.auto chose ' out.txt) || fail "no 'parallel.auto chose' line"
  python3 - "$1" "$line" <<'EOF' || fail "the layout line is not a layout of $1 ranks: $line"
import re, sys
m = re.search(r"chose dp (\d+) x tp (\d+) x pp (\d+) x sp (\d+).*\(predicted [0-9.e+-]+ s/step", sys.argv[2])
assert m and eval("*".join(m.groups())) == int(sys.argv[1]), m
EOF
  grep -q '^loom: done: 2 steps' out.txt || fail "the run did not finish its 2 steps"
}

on2 || fail "the first 2-rank run exited $?"
grep -qxF "loom: parallel.auto: measured this machine for 2 ranks and cached it in $cache" out.txt ||
  fail "no line saying the cluster was measured and cached in $cache"
[ -s "$cache" ] || fail "$cache was not written"
chose 2
python3 - "$cache" <<'EOF' || fail "$cache is not this machine as a cluster of 2 devices"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
assert c["name"] == "local" and c["device"]["per_node"] == 2 and c["device"]["max_nodes"] == 1, c
EOF
sum=$(md5sum <"$cache")

on2 || fail "the second 2-rank run exited $?"
grep -q "^loom: parallel.auto: planning on the local cluster cached in $cache " out.txt ||
  fail "the second run does not say it used the cache"
! grep -q "measured this machine" out.txt || fail "the second run measured again"
chose 2
[ "$(md5sum <"$cache")" = "$sum" ] || fail "the second run changed $cache"

sed -i 's/^unix_time = .*/unix_time = 0/' "$cache"
on2 || fail "the 2-rank run on an old cache exited $?"
grep -qF "loom: warning: parallel.auto's cached cluster $cache is stale (measured " err.txt ||
  fail "no warning that the old cache is stale"
grep -q "^loom: parallel.auto: measured this machine again for 2 ranks x " out.txt ||
  fail "the old cache was not measured again"
chose 2
python3 - "$cache" <<'EOF' || fail "the cache measured again does not record when"
import sys, time, tomllib
assert tomllib.load(open(sys.argv[1], "rb"))["measured"]["unix_time"] > time.time() - 3600
EOF

# refused2 PATTERN SET...: rank 0 refuses (nothing fits; a malformed cache): both ranks end, exit 2,
# one `loom: error:` line, no layout chosen.
refused2() {
  local pattern=$1
  shift
  timeout -k 5 120 "${mpi[@]}" -n 2 -x XDG_CACHE_HOME "$loom" "${train[@]}" "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "exit code $rc for $*, want 2"
  [ "$(grep -c '^loom: error: ' err.txt)" -eq 1 ] || fail "not one 'loom: error:' line for $*"
  grep -qF -- "$pattern" err.txt || fail "the error of $* lacks '$pattern'"
  [ ! -s out.txt ] || fail "stdout is not empty for $*"
}
refused2 "no layout of gpt on 2 x local fits" --set model.d_model=16384 --set model.n_heads=128 --set model.n_layers=64
printf 'name = "local"\n[device\n' >"$cache"
refused2 "parallel.auto's cached cluster: $cache: not a cluster file"

XDG_CACHE_HOME=$dir/empty "$loom" "${train[@]}" >out.txt 2>err.txt || fail "the 1-rank run exited $?"
grep -q "^loom: parallel.auto: no cached cluster in $dir/empty/loom/local-cluster.toml, and 1 rank cannot measure" \
  out.txt || fail "the 1-rank run does not say it planned on the shipped local cluster"
chose 1
[ ! -e "$dir/empty" ] || fail "the 1-rank run wrote a cache: $(find "$dir/empty")"
echo "ok: parallel.auto"

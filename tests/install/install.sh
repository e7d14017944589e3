#!/usr/bin/env bash
# loom as a user gets it (issue 20, docs/cpp-api.md): installs the build into a fresh prefix, then
# builds examples/custom_model, copied out of the source tree, against that prefix alone, and runs
# it: the gradient check of its layer, a dp = 2 training, its equivalence to the serial run under
# dp = 2 and pp = 2 (1e-9), and bad input refused with loom's one line.
#   usage: install.sh BUILD SOURCE MPIEXEC [MPIEXEC ARGS...]
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "install test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }
for f in lib/libloom.so lib/libloom_sentencepiece.so bin/loom include/loom/loom.h lib/cmake/loom/loomConfig.cmake \
         lib/cmake/loom/loomConfigVersion.cmake share/loom/clusters/local.toml; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
# (No `cmd | grep -q` under pipefail in these scripts: grep -q leaves at its first match, and a
# writer still writing then dies of SIGPIPE and fails the pipeline. Outputs are captured first.)
version=$("$prefix/bin/loom" --version)
[ "$(head -1 <<<"$version")" = "loom $(sed -n 's/.*kVersion = "\(.*\)";/\1/p' "$src/src/loom/version.h")" ] ||
  fail "the installed loom reports another version: $version"
grep -q '^libtorch 2\.' <<<"$version" || fail "the installed loom does not name its libtorch 2: $version"

# The installed CLI finds what it ships relative to itself, not in the source tree: a cluster file
# only the prefix has, and the SentencePiece module in lib/.
sed 's/^name = .*/name = "installed-only"/' "$prefix/share/loom/clusters/local.toml" \
  >"$prefix/share/loom/clusters/installed-only.toml"
(cd "$work" && "$prefix/bin/loom" simulate -c "$src/configs/gpt-tiny.toml" --cluster installed-only --gpus 1 >/dev/null) ||
  fail "the installed loom does not find share/loom/clusters"
head -c 20000 /usr/share/common-licenses/GPL-3 >"$work/text.txt"
(cd "$work" && LD_DEBUG=files "$prefix/bin/loom" data prepare --text text.txt --tokenizer bpe --vocab 400 \
   --out tokens.bin >/dev/null 2>"$work/dl.log") || { tail -5 "$work/dl.log"; fail "the installed loom cannot tokenize"; }
grep -q "file=$prefix/lib/libloom_sentencepiece.so" "$work/dl.log" ||
  fail "the installed loom did not load its own SentencePiece module"

# The public surface is closed: every loom header an installed header includes is installed, and
# one outside it (the trainer's internals) is not there to include.
missing=$(cd "$prefix/include" && grep -ho '#include "loom/[^"]*"' -r loom | sed 's/#include "\(.*\)"/\1/' | sort -u |
          while read -r h; do [ -f "$h" ] || echo "$h"; done)
[ -z "$missing" ] || fail "installed headers include headers that are not installed: $missing"
[ ! -e "$prefix/include/loom/train/trainer.h" ] || fail "loom/train/trainer.h is installed, but is not public"
printf '#include <loom/train/trainer.h>\n' >"$work/private.cpp"
if c++ -std=c++20 -fsyntax-only -I"$prefix/include" "$work/private.cpp" 2>"$work/private.log"; then
  fail "a header outside the public surface compiled from the installed tree"
fi
grep -q "loom/train/trainer.h: No such file" "$work/private.log" || { cat "$work/private.log"; fail "unexpected error"; }

# The example, out of the source tree, against the prefix only.
cp -r "$src/examples/custom_model" "$work/example"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$work/example" -B "$work/example/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      "${launcher[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configuring the example failed"; }
cmake --build "$work/example/build" -j 2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building the example failed"; }
# libtorch may live in the source tree (.venv/, cmake/torch.cmake): its paths are libtorch's, not loom's.
torch_root=$(sed -n 's|^Torch_DIR:PATH=\(.*\)/share/cmake/Torch$|\1|p' "$build/CMakeCache.txt")
flags=$(cat "$work/example/build/CMakeFiles/custom_model.dir/flags.make" "$work/example/build/CMakeFiles/custom_model.dir/link.txt")
if grep -q -- "$src" <<<"${flags//$torch_root/}"; then
  fail "the example's build refers to loom's source tree"
fi
app=$work/example/build/custom_model
ldd "$app" >"$work/ldd.log"
grep -q "libloom.so.* => $prefix/lib/libloom.so" "$work/ldd.log" ||
  { cat "$work/ldd.log"; fail "the example does not run on the installed libloom.so"; }

cd "$work/example"
"$app" gradcheck | tee "$work/gradcheck.log"
grep -q "^gradient check passed" "$work/gradcheck.log" || fail "the gradient check did not pass"

"${mpiexec[@]}" -n 2 "$app" train two_experts.toml --set parallel.dp=2 --metrics "$work/metrics.jsonl" | tee "$work/train.log"
[ "$(grep -c '^step ' "$work/train.log")" = 3 ] || fail "the dp = 2 training did not print 3 steps"
[ "$(wc -l <"$work/metrics.jsonl")" = 3 ] || fail "the metrics file has not 3 lines"

# parallel.auto plans the program's own kind (NOTE [Model kinds are a value]): the planner validates
# and simulates two_experts' layouts (it has no tensor-parallel form, so none with tp > 1 is chosen)
# and the layout it chose trains.
mkdir -p "$work/cache"
XDG_CACHE_HOME=$work/cache "${mpiexec[@]}" -n 2 -x XDG_CACHE_HOME "$app" train two_experts.toml \
  --set parallel.auto=true >"$work/auto.log" 2>&1 || { cat "$work/auto.log"; fail "parallel.auto with the program's own kind"; }
[ "$(grep -c '^step ' "$work/auto.log")" = 3 ] || { cat "$work/auto.log"; fail "the parallel.auto training did not print 3 steps"; }
[ -s "$work/cache/loom/local-cluster.toml" ] || fail "parallel.auto measured no local cluster"

for layout in parallel.dp=2 parallel.pp=2; do
  "${mpiexec[@]}" -n 2 "$app" equivalence two_experts.toml --set "$layout" | tee "$work/equivalence.log"
  grep -q "^equivalence passed" "$work/equivalence.log" || fail "$layout: not equal to the serial run"
done

# Bad input from the custom kind: one line, exit 2, on every rank's behalf.
refuses() {  # refuses PATTERN ARGS...: the run exits 2 and says PATTERN after "loom: error:"
  local pattern=$1 rc=0
  shift
  "${mpiexec[@]}" -n 2 "$app" "$@" >"$work/out.log" 2>"$work/err.log" || rc=$?
  [ "$rc" = 2 ] || { cat "$work/err.log"; fail "$*: exit code $rc, not 2"; }
  grep -q "^loom: error: .*$pattern" "$work/err.log" || { cat "$work/err.log"; fail "$*: no 'loom: error: ...$pattern'"; }
}
refuses 'model.kind = "two_experts" has no tensor-parallel form' train two_experts.toml --set parallel.tp=2
refuses 'model.kind = "nosuch" is not one of: gpt, dlrm, llama, two_experts' train two_experts.toml --set model.kind=nosuch
echo "install test: installed, built against $prefix alone, gradient check, dp = 2 training, parallel.auto training and equivalence under dp = 2 and pp = 2 passed"

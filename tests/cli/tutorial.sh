#!/usr/bin/env bash
# tutorial.sh LOOM SOURCE_DIR: runs docs/tutorial.md as a newcomer would. Every ```toml NAME block
# is written to NAME and every line of every ```sh block runs, in order, exactly as written, in a
# fresh directory with LOOM's folder on PATH (as `loom`) and LOOM_REPO set; any command that fails
# fails the test. Then checks what the tutorial promises: a validation loss in the metrics, the
# run resumed at step 100 and ended at 150 over 2 ranks, a checkpoint, an SVG, generated text.
set -euo pipefail
loom=$(readlink -f "$1") src=$(readlink -f "$2")
doc=$src/docs/tutorial.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Open MPI as root and in containers: what scripts/mpirun.sh passes as flags, as environment.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export LOOM_REPO=$src
mkdir -p "$work/bin"
ln -s "$loom" "$work/bin/loom"
# The doc puts $LOOM_REPO/build/bin on PATH; the binary under test goes first.
export PATH="$work/bin:$PATH"

# The blocks: toml files, and sh commands (one per line) into one script that stops at the first failure.
python3 - "$doc" "$work" <<'PY'
import re, sys
doc, work = sys.argv[1], sys.argv[2]
text = open(doc).read()
commands = []
for info, body in re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.S | re.M):
    kind, *name = info.split()
    if kind == "toml" and name:
        open(f"{work}/{name[0]}", "w").write(body)
    elif kind == "sh":
        commands += [line for line in body.splitlines() if line.strip()]
if len(commands) < 8:
    sys.exit(f"tutorial.sh: found {len(commands)} commands in {doc}; the blocks are not where they were")
with open(f"{work}/tutorial-commands.sh", "w") as out:
    out.write("set -euo pipefail\n")
    for c in commands:
        out.write(f"echo '+ {c.replace(chr(39), chr(39) + chr(92) + chr(39) + chr(39))}'\n{c}\n")
PY
cd "$work"
bash tutorial-commands.sh > tutorial.log 2>&1 || { cat tutorial.log; fail "a command of docs/tutorial.md failed (above)"; }

# What the tutorial promises.
python3 - <<'PY' || { cat tutorial.log; exit 1; }
import json, sys
steps = [json.loads(l) for l in open("run.jsonl")]
nums = [s["step"] for s in steps]
assert nums == list(range(1, 151)), f"run.jsonl steps {nums[:3]}..{nums[-3:]}, want 1..150"
val = [s for s in steps if "val_loss" in s]
assert [s["step"] for s in val] == [50, 100, 150], f"validation at steps {[s['step'] for s in val]}"
assert all(s["val_ppl"] > 1 for s in val)
assert val[-1]["val_loss"] < val[0]["val_loss"], "the validation loss did not fall"
assert steps[-1]["loss"] < steps[0]["loss"] - 1.0, "the training loss did not fall"
PY
grep -q "resumed from .*step-0000100" tutorial.log || fail "the second run did not resume from step 100"
grep -q "2 ranks" tutorial.log || fail "the resumed run did not run on 2 ranks"
python3 -c "import xml.etree.ElementTree as E; r = E.parse('loss.svg').getroot(); assert r.tag.endswith('svg')" \
  || fail "loss.svg is not an SVG"
# Both generations printed text after their prompts.
[ "$(grep -c '^+ loom generate' tutorial.log)" -eq 2 ] || fail "expected 2 generate commands"
[ -n "$(awk '/^\+ loom generate/{getline; print}' tutorial.log)" ] || fail "generate printed nothing"
cat tutorial.log
echo "ok: docs/tutorial.md ran end to end ($(grep -c '^+ ' tutorial.log) commands)"

#!/usr/bin/env bash
# plot.sh LOOM SOURCE_DIR: the pictures (docs/pictures.md) from the command line.
#  - `loom plot` of one run, and of two runs with validation losses and labels that need escaping;
#    `loom schedule --svg` of 1f1b, zb-h1 and interleaved (2 chunks): each is well-formed XML whose
#    root is an svg element in the svg namespace with width, height and a matching viewBox, and
#    renders with rsvg-convert to a PNG of exactly that width and height.
#  - `schedule --csv` writes a schedule that `--from` reads back.
#  - Bad input, each one `loom: error:` line, exit 2, nothing on stdout and no output written:
#    a metrics file that is not JSON Lines (the file and line named), a missing one, one without
#    any loss, --out onto an input or a directory, --label counts that do not match, --svg into a
#    directory that does not exist or onto --csv.
set -u -o pipefail
loom=$1 src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -s $f ] && { echo "--- $f"; tail -8 $f; }; done; exit 1; }
command -v rsvg-convert >/dev/null || fail "rsvg-convert is missing (Debian librsvg2-bin; scripts/install-deps.sh)"

# Metrics as `loom train --metrics` writes them (the fields a plot reads, and some it ignores).
python3 - <<'EOF' || fail "writing the metrics files"
import json, math
for name, scale, val in (("one.jsonl", 1.0, False), ("two.jsonl", 0.9, True)):
    with open(name, "w") as f:
        for step in range(1, 41):
            r = {"step": step, "loss": scale * (2 + 6 / step), "lr": 3e-4, "tokens_per_s": 1000 + 25 * step,
                 "step_ms": 12.5, "sparse_tables": []}
            if val and step % 10 == 0:
                r["val_loss"] = r["loss"] + 0.2
                r["val_ppl"] = math.exp(r["val_loss"])
            f.write(json.dumps(r) + "\n")
EOF

# check_svg FILE: well-formed, the svg namespace, width/height/viewBox agree, and the PNG that
# rsvg-convert renders has that size.
check_svg() {
  local svg=$1 png=${1%.svg}.png size
  size=$(python3 - "$svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
w, h = root.get("width"), root.get("height")
assert w and h and float(w) == int(w) and float(h) == int(h) and int(w) > 0 and int(h) > 0, (w, h)
assert root.get("viewBox") == f"0 0 {w} {h}", root.get("viewBox")
print(w, h)
EOF
  ) || fail "$svg is not a valid SVG document"
  rsvg-convert -o "$png" "$svg" 2>err.txt || fail "rsvg-convert could not render $svg"
  local rendered
  rendered=$(python3 -c '
import struct, sys
data = open(sys.argv[1], "rb").read(24)
assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
print(*struct.unpack(">II", data[16:24]))' "$png") || fail "$png is not a PNG"
  [ "$rendered" = "$size" ] || fail "$svg declares $size, its rendering is $rendered"
  echo "ok: $svg valid, renders at $size"
}

# made CMD...: the command succeeds (its stdout kept in out.txt).
made() { "$loom" "$@" >out.txt 2>err.txt || fail "loom $* exited $?"; }

made plot one.jsonl --out one.svg
grep -q "wrote one.svg (1 run, 40 steps)" out.txt || fail "plot does not say what it wrote"
check_svg one.svg
made plot one.jsonl two.jsonl --label 'base & <first>' --label second --title 'two runs' --log-y --out two.svg
check_svg two.svg
for text in 'base &amp; &lt;first&gt;' 'second (validation)' 'two runs' 'tokens/s' 'loss (log scale)'; do
  grep -qF ">$text</text>" two.svg || fail "two.svg lacks the text '$text'"
done
[ "$(grep -c '<polyline' two.svg)" -eq 5 ] || fail "two.svg should draw 5 lines (2 losses, 1 validation, 2 rates)"

for kind in 1f1b zb-h1 interleaved; do
  made schedule --kind $kind --stages 4 --microbatches 8 --chunks $([ $kind = interleaved ] && echo 2 || echo 1) \
    --svg $kind.svg
  check_svg $kind.svg
  grep -qF ">$kind: 4 stages, 8 micro-batches" $kind.svg || fail "$kind.svg lacks its title"
done
# One box per action: 4 ranks x 8 micro-batches x (F, BW) for 1f1b, x (F, B, W) for zb-h1, twice the
# F and BW for 2 chunks; plus the rows' backgrounds, the legend's swatches and the page.
[ "$(grep -c '<rect' 1f1b.svg)" -eq $((64 + 4 + 3 + 1)) ] || fail "1f1b.svg: not one box per action"
[ "$(grep -c '<rect' zb-h1.svg)" -eq $((96 + 4 + 4 + 1)) ] || fail "zb-h1.svg: not one box per action"
[ "$(grep -c '<rect' interleaved.svg)" -eq $((128 + 4 + 5 + 1)) ] || fail "interleaved.svg: not one box per action"

made schedule --kind zb-h1 --stages 3 --microbatches 5 --csv s.csv --svg s.svg
made schedule --from s.csv --stages 3 --microbatches 5 --svg from.svg
check_svg from.svg
[[ "$(ls -a)" == *loom-partial* ]] && fail "a temporary was left behind"

# refused PATTERN OUT ARGS...: the bad-input contract, and OUT not written ("" when OUT is an
# input or a directory: the checks after the call say what must hold).
refused() {
  local pattern=$1 out=$2
  shift 2
  "$src/tests/cli/expect_error.sh" "$loom" "$pattern" "$@" || fail "loom $* was not refused as expected"
  [ -z "$out" ] || [ ! -e "$out" ] || fail "loom $* wrote $out"
}
printf '{"step":1,"loss":3.0}\n{"step":2,"loss":2.9}\nstep 3 loss 2.8\n' >notjson.jsonl
refused "notjson.jsonl line 3: not a JSON object" bad.svg plot one.jsonl notjson.jsonl --out bad.svg
refused "metrics file 'absent.jsonl' does not exist" bad.svg plot absent.jsonl --out bad.svg
printf '{"step":1,"lr":0.1}\n{"step":2,"lr":0.1}\n' >noloss.jsonl
refused 'noloss.jsonl: none of its 2 lines has a numeric "loss"' bad.svg plot noloss.jsonl --out bad.svg
sum=$(md5sum <one.jsonl)
refused "--out 'one.jsonl' is the same file as metrics file 'one.jsonl'" "" plot one.jsonl --out one.jsonl
[ "$(md5sum <one.jsonl)" = "$sum" ] || fail "the input one.jsonl changed"
ln -s one.jsonl link.jsonl
refused "is the same file as metrics file 'one.jsonl'" "" plot one.jsonl --out link.jsonl
[ "$(md5sum <one.jsonl)" = "$sum" ] && [ -L link.jsonl ] || fail "plot --out onto a link to its input changed it"
mkdir adir
refused "--out 'adir' is a directory" "" plot one.jsonl --out adir
[ -z "$(ls -A adir)" ] || fail "plot --out adir wrote into the directory"
refused "1 --label for 2 metrics files" bad.svg plot one.jsonl two.jsonl --label a --out bad.svg
refused "--svg nodir/s.svg: the directory 'nodir' does not exist" nodir/s.svg schedule --kind 1f1b --svg nodir/s.svg
refused "--csv 'same.txt' and --svg 'same.txt' are the same file" same.txt schedule --csv same.txt --svg same.txt
sum=$(md5sum <s.csv)
refused "--svg 's.csv' is the same file as --from 's.csv'" "" schedule --from s.csv --stages 3 --microbatches 5 \
  --svg s.csv
[ "$(md5sum <s.csv)" = "$sum" ] || fail "schedule --svg onto its --from changed it"
[[ "$(ls -a)" == *loom-partial* ]] && fail "a refused run left a temporary behind"
echo "plot: all ok"

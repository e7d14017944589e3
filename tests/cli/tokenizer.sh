#!/usr/bin/env bash
# tokenizer.sh LOOM SOURCE_DIR: `loom data prepare` with a subword tokenizer, end to end.
#  - A BPE tokenizer trained on the licence texts every Debian system ships, with a validation
#    split: the token file, its sidecar, the tokenizer model and the split with its sidecar exist,
#    and the sidecars say what they hold; the printed settings pass `loom config --check` with
#    model.vocab = "auto" and train two steps.
#  - The same texts prepared again with --tokenizer MODEL give the same ids.
#  - Bad input, each one `loom: error:` line, exit 2, and nothing written (an existing --out left
#    unchanged): an empty text, a text that is not UTF-8 (its line named), a vocabulary the text
#    cannot support, a missing or non-model --tokenizer, --valid-fraction out of (0, 1) or with one
#    document, an explicit dtype too narrow; at `loom config --check` and `loom train`, a token
#    file whose tokenizer model is missing and a model.vocab that disagrees with the sidecar.
set -u
loom=$(realpath "$1") src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0
fail() { echo "FAIL: $*"; for f in err out; do [ -s $f ] && { echo "--- $f"; cat $f; }; done; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

licences=/usr/share/common-licenses
texts=("$licences/GPL-3" "$licences/Apache-2.0" "$licences/MPL-2.0" "$licences/LGPL-2.1" "$licences/Artistic")
for t in "${texts[@]}"; do [ -s "$t" ] || { echo "FAIL: $t is missing"; exit 1; }; done

# The files in $dir and their checksums, to see that a refused command changed nothing.
snapshot() { find . -type f ! -name out ! -name err -print0 | sort -z | xargs -0 sha256sum; }
# refused WHAT PATTERN ARGS...: exit 2, one stderr line `loom: error: ...` holding PATTERN,
# nothing on stdout, and no file of $dir created or changed.
refused() {
  local what=$1 pattern=$2 before
  shift 2
  before=$(snapshot)
  "$loom" "$@" >out 2>err
  local rc=$?
  if [ "$rc" -ne 2 ]; then fail "$what: exit code $rc, want 2"; return; fi
  if [ "$(wc -l <err)" -ne 1 ] || ! grep -q '^loom: error: ' err; then fail "$what: stderr is not one error line"; return; fi
  if [ -s out ]; then fail "$what: stdout is not empty"; return; fi
  if ! grep -qF -- "$pattern" err; then fail "$what: the error lacks '$pattern'"; return; fi
  if [ "$(snapshot)" != "$before" ]; then fail "$what: a file was written or changed"; return; fi
  ok "$what: $(cat err)"
}

# One BPE token file with a validation split.
"$loom" data prepare --text "${texts[@]}" --tokenizer bpe --vocab 1000 --valid-fraction 0.05 --out data.bin >out 2>err ||
  fail "prepare bpe"
for f in data.bin data.bin.json data.bin.tokenizer.model data.valid.bin data.valid.bin.json; do
  [ -s $f ] && grep -qF "wrote" out && grep -qF "$f" out || fail "$f was not written and printed"
done
python3 - <<'EOF' && ok "the sidecars: bpe, vocab 1000, the model, both checksums, every source" || fail "the sidecars"
import json, os
t, v = json.load(open("data.bin.json")), json.load(open("data.valid.bin.json"))
for s, name in ((t, "data.bin"), (v, "data.valid.bin")):
    assert s["format"] == "loom-tokens" and s["version"] == 1, s
    assert s["tokenizer"] == "bpe" and s["vocab"] == 1000 and s["dtype"] == "uint16", s
    assert s["tokenizer_model"] == "data.bin.tokenizer.model" and len(s["tokenizer_checksum"]) == 16, s
    assert [x["path"] for x in s["sources"]][0] == "/usr/share/common-licenses/GPL-3" and len(s["sources"]) == 5, s
    assert os.path.getsize(name) == 2 * s["tokens"], (name, s)
assert t["tokenizer_checksum"] == v["tokenizer_checksum"]
share = v["tokens"] / (t["tokens"] + v["tokens"])
assert 0.02 < share < 0.09, share
assert max(int.from_bytes(open("data.bin", "rb").read()[i:i + 2], "little") for i in range(0, 2000, 2)) < 1000
EOF
settings=$(sed -n 's/^train with //p' out)
[ "$settings" = "--set data.source=tokens:data.bin --set data.valid=tokens:data.valid.bin --set model.vocab=auto" ] &&
  ok "the printed settings: $settings" || fail "the printed settings: '$settings'"
tiny=(-c "$src/configs/gpt-tiny.toml" --set model.d_model=32 --set model.n_layers=1 --set model.seq_len=32
      --set train.threads=1)
# shellcheck disable=SC2086
"$loom" config --check "${tiny[@]}" $settings >out 2>err && ok "config --check with model.vocab = auto" ||
  fail "config --check with model.vocab = auto"
# shellcheck disable=SC2086
"$loom" config --print "${tiny[@]}" $settings 2>err | grep -qx 'vocab = 1000' && ok "auto resolves to 1000" ||
  fail "model.vocab = auto did not resolve to 1000"
# shellcheck disable=SC2086
"$loom" train "${tiny[@]}" --peak-flops 1e10 --set train.steps=2 $settings >out 2>err &&
  grep -q 'step 2/2' out && ok "trains on the bpe tokens" || fail "training on the bpe tokens"

# The model reused: the same ids, and a copy beside the new token file.
"$loom" data prepare --text "${texts[@]}" --tokenizer data.bin.tokenizer.model --out again.bin >out 2>err &&
  cmp -s again.bin.tokenizer.model data.bin.tokenizer.model &&
  [ "$(cat data.bin data.valid.bin | wc -c)" -eq "$(wc -c <again.bin)" ] && ok "a reused model gives the same ids" ||
  fail "prepare with --tokenizer MODEL"

# Bad input to `loom data prepare`; --out exists and must stay as it is.
printf 'keep me\n' >keep.bin
printf '' >empty.txt
printf 'first line\nsecond line\ncaf\xe9\n' >latin1.txt
printf 'one paragraph\nof two lines\n' >one.txt
refused "an empty text" "--text 'empty.txt' is empty" data prepare --text "${texts[0]}" empty.txt --out keep.bin
refused "a text that is not UTF-8" "--text 'latin1.txt' is not UTF-8: line 3 has the byte 0xe9" \
  data prepare --text latin1.txt --out keep.bin
refused "a vocabulary the text cannot support" "--vocab 200000 is more than the text supports" \
  data prepare --text "${texts[1]}" --tokenizer bpe --vocab 200000 --out keep.bin
refused "a missing --tokenizer model" "--tokenizer 'none.model' is neither byte, bpe, unigram nor an existing" \
  data prepare --text "${texts[1]}" --tokenizer none.model --out keep.bin
refused "a --tokenizer that is not a model" "tokenizer model 'one.txt' is not a SentencePiece model" \
  data prepare --text "${texts[1]}" --tokenizer one.txt --out keep.bin
refused "--valid-fraction 1" "--valid-fraction 1 must be in (0, 1)" \
  data prepare --text "${texts[1]}" --valid-fraction 1 --out keep.bin
refused "--valid-fraction 0" "--valid-fraction 0 must be in (0, 1)" \
  data prepare --text "${texts[1]}" --valid-fraction 0 --out keep.bin
refused "--valid-fraction with one document" "but the text holds 1 document" \
  data prepare --text one.txt --valid-fraction 0.1 --out keep.bin
refused "--dtype uint16 for a wide vocabulary" "--dtype uint16 holds ids below 65536, but the tokenizer has 70000" \
  data prepare --text "${texts[@]}" --tokenizer unigram --vocab 70000 --dtype uint16 --out keep.bin
refused "an output onto an input" "--out (its tokenizer model) 'data.bin.tokenizer.model' is the same file as --tokenizer" \
  data prepare --text "${texts[1]}" --tokenizer data.bin.tokenizer.model --out data.bin

# Bad input at `loom config --check` and `loom train`: the data and the config disagree.
refused "config --check: an explicit vocab unlike the sidecar's" \
  "model.vocab = 4096, but data.source 'data.bin' holds ids of a vocabulary of 1000" \
  config --check "${tiny[@]}" --set data.source=tokens:data.bin --set model.vocab=4096
"$loom" data prepare --text "${texts[1]}" --out bytes.bin >/dev/null 2>&1 || fail "prepare bytes"
refused "train: data.valid of another tokenizer" "model.vocab = 1000, but data.valid 'bytes.bin' holds ids of a vocabulary of 256" \
  train "${tiny[@]}" --set data.source=tokens:data.bin --set data.valid=tokens:bytes.bin --set model.vocab=auto
mv data.bin.tokenizer.model away.model
refused "config --check: the tokenizer model missing" \
  "tokenizer model 'data.bin.tokenizer.model' is missing: the sidecar 'data.bin.json' of token file 'data.bin' names it" \
  config --check "${tiny[@]}" --set data.source=tokens:data.bin --set model.vocab=auto
refused "train: the tokenizer model missing" "tokenizer model 'data.bin.tokenizer.model' is missing" \
  train "${tiny[@]}" --set data.source=tokens:data.bin --set model.vocab=auto --metrics m.jsonl
mv away.model data.bin.tokenizer.model

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all tokenizer checks passed"

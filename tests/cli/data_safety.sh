#!/usr/bin/env bash
# data_safety.sh LOOM SOURCE_DIR: data files are never misread, never lost, never half-written.
#  - `data prepare` refuses --out equal to --text (the text unchanged), --out . or a directory
#    (no temporary left), a directory or an empty --text; it writes the sidecar OUT.json.
#  - A uint32 token file without its sidecar is refused under data.token_dtype = "auto"; with the
#    sidecar it trains.
#  - A token file truncated while a run trains on it ends the run with exit 1 and a message that
#    says so, not a Bus error.
#  - `data clicks` refuses a file larger than the free space (and a byte count past int64),
#    leaving no file.
#  - The printed hint is shell-quoted when the path has a space.
set -u
loom=$(realpath "$1") src=$2
dir=$(mktemp -d)
trap 'kill "${train_pid:-}" 2>/dev/null; rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; for f in "$dir"/err "$dir"/out; do [ -s "$f" ] && { echo "--- ${f##*/}"; cat "$f"; }; done; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# Runs loom with the arguments; requires exit code 2, one stderr line `loom: error: ...` holding
# PATTERN, and no temporary of ours in $dir.
refused() {
  local what=$1 pattern=$2
  shift 2
  "$loom" "$@" >"$dir/out" 2>"$dir/err"
  local rc=$?
  if [ "$rc" -ne 2 ]; then fail "$what: exit code $rc, want 2"; return 1; fi
  if [ "$(wc -l <"$dir/err")" -ne 1 ] || ! grep -q '^loom: error: ' "$dir/err"; then
    fail "$what: stderr is not one 'loom: error:' line"; return 1
  fi
  if ! grep -qF -- "$pattern" "$dir/err"; then fail "$what: the error lacks '$pattern'"; return 1; fi
  if [ -n "$(find "$dir" -name '.*.loom-partial')" ]; then fail "$what: a temporary was left"; return 1; fi
  ok "$what: $(cat "$dir/err")"
}

for i in $(seq 20); do cat "$src/README.md"; done >"$dir/text.txt"
tiny=(-c "$src/configs/gpt-tiny.toml" --set model.vocab=256 --set model.d_model=32 --set model.n_layers=1
      --set model.seq_len=32 --set train.threads=1 --peak-flops 1e10)

# --out is --text: refused before anything is written; the text is unchanged.
before=$(sha256sum <"$dir/text.txt")
refused "prepare --out = --text" "is the same file as --text" data prepare --text "$dir/text.txt" --out "$dir/text.txt"
[ "$(sha256sum <"$dir/text.txt")" = "$before" ] && ok "the text is unchanged" || fail "the text changed"
# The same file by another name.
ln -s "$dir/text.txt" "$dir/link.txt"
refused "prepare --out = --text by a link" "is the same file as --text" data prepare --text "$dir/text.txt" \
  --out "$dir/link.txt"
[ "$(sha256sum <"$dir/text.txt")" = "$before" ] && ok "the text is unchanged" || fail "the text changed"
# --out a directory.
(cd "$dir" && refused "prepare --out ." "is a directory" data prepare --text text.txt --out .) ||
  failures=$((failures + 1))
mkdir "$dir/sub"
refused "prepare --out a directory" "is a directory" data prepare --text "$dir/text.txt" --out "$dir/sub"
[ -z "$(ls -A "$dir/sub")" ] && ok "the directory is untouched" || fail "something was written in the directory"
# --text a directory, or empty.
refused "prepare --text a directory" "is a directory" data prepare --text "$dir/sub" --out "$dir/x.bin"
: >"$dir/empty.txt"
refused "prepare --text empty" "is empty" data prepare --text "$dir/empty.txt" --out "$dir/x.bin"
[ ! -e "$dir/x.bin" ] && [ ! -e "$dir/x.bin.json" ] && ok "no token file written" || fail "a token file was written"

# A uint32 file: with its sidecar it trains; without, "auto" refuses it (it read as uint16 before).
"$loom" data prepare --dtype uint32 --text "$dir/text.txt" --out "$dir/u32.bin" >"$dir/out" 2>"$dir/err" ||
  fail "prepare --dtype uint32"
grep -q '"dtype": "uint32"' "$dir/u32.bin.json" && ok "the sidecar says uint32" || fail "no uint32 sidecar"
"$loom" train "${tiny[@]}" --set train.steps=2 --set data.source="tokens:$dir/u32.bin" >"$dir/out" 2>"$dir/err" &&
  grep -q "tokens of 4 bytes" "$dir/out" && ok "uint32 with its sidecar trains as 4-byte tokens" ||
  fail "uint32 with its sidecar did not train as 4-byte tokens"
mv "$dir/u32.bin.json" "$dir/u32.json.away"
refused "uint32 without a sidecar under auto" "data.token_dtype" train "${tiny[@]}" --set train.steps=2 \
  --set data.source="tokens:$dir/u32.bin"
"$loom" train "${tiny[@]}" --set train.steps=2 --set data.source="tokens:$dir/u32.bin" --set data.token_dtype=uint32 \
  >"$dir/out" 2>"$dir/err" && ok "uint32 without a sidecar trains when stated" || fail "stated uint32 did not train"
# A sidecar that disagrees: with the file, or with token_dtype.
mv "$dir/u32.json.away" "$dir/u32.bin.json"
refused "sidecar against token_dtype" "says its ids are uint32" train "${tiny[@]}" \
  --set data.source="tokens:$dir/u32.bin" --set data.token_dtype=uint16
head -c 1000 "$dir/u32.bin" >"$dir/cut.bin"
cp "$dir/u32.bin.json" "$dir/cut.bin.json"
refused "sidecar against the file" "the file changed since it was prepared" train "${tiny[@]}" \
  --set data.source="tokens:$dir/cut.bin"

# A token file truncated while a run trains on it: exit 1, the message, no Bus error.
"$loom" data prepare --text "$dir/text.txt" --out "$dir/run.bin" >/dev/null 2>&1 || fail "prepare run.bin"
"$loom" train "${tiny[@]}" --set train.steps=100000 --set train.log_every=100000 --set data.source="tokens:$dir/run.bin" \
  >"$dir/train.out" 2>"$dir/train.err" &
train_pid=$!
for _ in $(seq 600); do grep -q '^step' "$dir/train.out" 2>/dev/null && break; sleep 0.1; done
grep -q '^step' "$dir/train.out" || fail "the run did not start within 60 s"
sleep 0.5
truncate -s 10 "$dir/run.bin"
wait "$train_pid"
rc=$?
train_pid=
if [ "$rc" -eq 1 ] && grep -q "^loom: error: data file '.*run.bin' changed during the run (.* bytes at start, now 10); hint: do not rewrite" \
    "$dir/train.err" && ! grep -qi 'bus error' "$dir/train.err"; then
  ok "truncated under a run: exit 1, $(cat "$dir/train.err")"
else
  fail "truncated under a run: exit code $rc (want 1), stderr: $(cat "$dir/train.err")"
fi

# Clicks: a file past the free space, or past int64 bytes, is refused and nothing is written.
dlrm_sets=(--set parallel.dp=1 --set model.table_rows=1000 --set model.d_model=8
           --set "model.bottom_mlp=[16]" --set "model.top_mlp=[16]")
dlrm=(-c "$src/configs/dlrm-sparse.toml" "${dlrm_sets[@]}")
refused "clicks past the free space" "free; hint: write fewer" data clicks "${dlrm[@]}" --samples 100000000000 \
  --out "$dir/clicks.bin"
refused "clicks past int64 bytes" "more bytes than a file can hold" data clicks "${dlrm[@]}" \
  --samples 9000000000000000000 --out "$dir/clicks.bin"
[ ! -e "$dir/clicks.bin" ] && ok "no clicks file written" || fail "a clicks file was written"
cp "$src/configs/dlrm-sparse.toml" "$dir/dlrm.toml"
before=$(sha256sum <"$dir/dlrm.toml")
refused "clicks --out the config" "is the same file as the config file" data clicks -c "$dir/dlrm.toml" "${dlrm_sets[@]}" \
  --samples 10 --out "$dir/dlrm.toml"
[ "$(sha256sum <"$dir/dlrm.toml")" = "$before" ] && ok "the config is unchanged" || fail "the config changed"

# Hints that paste: a path with a space comes back quoted, and the quoted command trains.
mkdir "$dir/my dir"
"$loom" data prepare --text "$dir/text.txt" --out "$dir/my dir/x.bin" >"$dir/out" 2>"$dir/err" || fail "prepare with a space"
if grep -qF -- "--set data.source='tokens:$dir/my dir/x.bin'" "$dir/out"; then
  ok "the hint is quoted: $(cat "$dir/out")"
  hint=$(sed -n 's/.*train with //p' "$dir/out")
  eval "\"\$loom\" train \"\${tiny[@]}\" --set train.steps=1 $hint" >"$dir/out" 2>"$dir/err" &&
    ok "the pasted hint trains" || fail "the pasted hint does not train"
else
  fail "the hint is not quoted"
fi
"$loom" data clicks "${dlrm[@]}" --samples 10 --out "$dir/my dir/c.bin" >"$dir/out" 2>"$dir/err" &&
  grep -qF -- "--set data.source='clicks:$dir/my dir/c.bin'" "$dir/out" && ok "the clicks hint is quoted" ||
  fail "the clicks hint is not quoted"

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "ok: data safety"

#!/usr/bin/env bash
# docs/memory.md's worked example is what `loom config --print` prints today: the plan's lines
# (without the per-axis traffic lines) equal the block in the document, and so does the refusal.
set -euo pipefail
loom=$1 root=$2
doc=$root/docs/memory.md
got=$("$loom" config -c "$root/configs/gpt-tiny.toml" --set parallel.pp=4 --set train.global_batch=32 \
  --set memory.budget=80MiB --set memory.policy=auto --set parallel.partition=auto --print | grep '^#' |
  grep -v '^#   comm ')
want=$(sed -n '/^# plan: 4 ranks = dp 1 x pp 4/,/^```$/p' "$doc" | grep '^#')
if [ "$got" != "$want" ]; then
  echo "docs/memory.md's example differs from loom config --print:" >&2
  diff <(echo "$want") <(echo "$got") >&2 || true
  exit 1
fi
rc=0
refusal=$("$loom" config -c "$root/configs/gpt-tiny.toml" --set parallel.pp=2 --set memory.policy=auto \
  --set memory.budget=60MiB --set train.global_batch=32 2>&1 >/dev/null) || rc=$?
[ "$rc" -eq 2 ] || { echo "the refused budget exited $rc, not 2: $refusal" >&2; exit 1; }
grep -qxF -- "$refusal" "$doc" || { echo "docs/memory.md's refusal differs: $refusal" >&2; exit 1; }
echo "docs/memory.md's example and refusal match loom config"

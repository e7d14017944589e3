#!/usr/bin/env bash
# The layering check can fail: a copy of src/loom with one planted back-edge (the nn folder, at the
# bottom of the layers, including a model header) must be refused, naming that file and line.
#   layering_planted.sh TABLE SRC_DIR
set -euo pipefail
table=$1 src=$2
here=$(cd "$(dirname "$0")" && pwd)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$src"/. "$copy"/
printf '#pragma once\n// planted\n#include "loom/models/model.h"\n' >"$copy/nn/planted.h"
if out=$("$here/layering.sh" "$table" "$copy" 2>&1); then
  echo "layering_planted: the check passed a planted back-edge:"; echo "$out"; exit 1
fi
expected="layering: nn/planted.h:3: nn may not include loom/models/"
if ! grep -qF "$expected" <<<"$out"; then
  echo "layering_planted: expected a line starting '$expected', got:"; echo "$out"; exit 1
fi
echo "layering_planted: refused as expected: $(grep -F "$expected" <<<"$out")"

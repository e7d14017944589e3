#!/usr/bin/env bash
# The layering of src/loom (docs/architecture.md), checked on the includes: a file in folder F may
# include loom headers of F itself and of the folders F's library links to, directly or through
# them (the table src/loom/CMakeLists.txt writes). Any other include is a back-edge or a skipped
# declaration: named with its file and line, and the test fails.
#   layering.sh TABLE SRC_DIR
set -euo pipefail
table=$1 src=$2
declare -A deps allowed
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  deps[${line%%:*}]=${line#*:}
done <"$table"

# Folders reachable from $1 (itself included).
closure() {
  local todo=("$1") seen=" $1 " next dep
  while ((${#todo[@]})); do
    next=${todo[-1]}
    unset 'todo[-1]'
    for dep in ${deps[$next]-}; do
      [[ $seen == *" $dep "* ]] && continue
      seen+="$dep "
      todo+=("$dep")
    done
  done
  echo "$seen"
}

for folder in "${!deps[@]}"; do allowed[$folder]=$(closure "$folder"); done
failures=0
for dir in "$src"/*/; do
  folder=$(basename "$dir")
  if [[ -z ${allowed[$folder]+x} ]]; then
    echo "layering: folder '$folder' has no library in src/loom/CMakeLists.txt (add it with loom_folder)"
    failures=$((failures + 1))
    continue
  fi
  while IFS=: read -r file line text; do
    target=$(sed -E 's|.*"loom/([a-z_]+)/.*|\1|' <<<"$text")
    [[ ${allowed[$folder]} == *" $target "* ]] && continue
    echo "layering: ${file#"$src"/}:$line: $folder may not include loom/$target/ (it may use:${deps[$folder]:- nothing}" \
         "and what those use): $text"
    failures=$((failures + 1))
  done < <(grep -Hn -E '^\s*#\s*include\s+"loom/[a-z_]+/' "$dir"* || true)
done
if ((failures > 0)); then
  echo "layering: $failures include(s) against the layering; move the code down, or pass what it needs in"
  exit 1
fi
echo "layering: ${#deps[@]} folders, no back-edge"

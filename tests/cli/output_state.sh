# output_state.sh, sourced by the bad-input scripts (cli/expect_error.sh, dist/bad_input.sh): what a
# refused loom command line must leave as it found.
#
# output_state ARGS...: one line per path the command line names as an output, saying what is there:
# "absent", a file's checksum, a link's target, a special file's type, a directory (a file option's
# directory: its inode only, since such a directory may be /tmp, which others write into; a
# checkpoint.dir: every entry, with the checksum of every file). The outputs are the values of
# --out, --csv, --svg, --trace, --metrics and --cluster-out (`--opt VALUE` or `--opt=VALUE`), a
# checkpoint.dir given with --set, and what loom writes beside them: for --out, the sidecar
# OUT.json, the tokenizer model OUT.tokenizer.model and the validation split (.valid before the
# extension) with its sidecar (`loom data prepare`); for every file, its temporary
# .NAME.loom-partial (NOTE [Output files]). Equal states before and after a refused run mean that
# nothing was created, changed or left half-written. A checkpoint.dir set inside a -c file is not
# seen.
#
# unchanged_state: the same, entry by entry (tree_state), for every folder EXPECT_UNCHANGED names
# (one, or several with ':' between them). A test names the real folder of its own that its refused
# outputs would land in, so that whatever is made, changed, removed or left there shows, under any
# name: also what output_state cannot see, in a directory given as an output or a directory made
# for a missing one. Each must be a directory (not a link to one), or the check would see nothing.

# file_state PATH: the state of one path that loom writes as a file.
file_state() {
  local p=$1
  if [ -L "$p" ]; then printf 'link %s -> %s\n' "$p" "$(readlink -- "$p")"; fi
  if [ -d "$p" ]; then
    printf 'directory %s inode %s\n' "$p" "$(stat -Lc %i -- "$p")"
  elif [ -f "$p" ]; then
    printf 'file %s %s\n' "$p" "$(md5sum <"$p" 2>&1 | cut -d" " -f1)"
  elif [ -e "$p" ]; then
    printf '%s %s\n' "$(stat -Lc %F -- "$p")" "$p"  # /dev/null or a fifo: never read it
  elif [ ! -L "$p" ]; then
    printf 'absent %s\n' "$p"
  fi
}

# tree_state DIR: a directory loom writes into (checkpoint.dir), entry by entry.
tree_state() {
  local dir=$1 f
  file_state "$dir"
  [ -d "$dir" ] || return 0
  find "$dir" -mindepth 1 | LC_ALL=C sort | while IFS= read -r f; do file_state "$f"; done
}

# with_temporary PATH: PATH and the temporary loom writes it through.
with_temporary() {
  printf '%s\n%s\n' "$1" "$(dirname -- "$1")/.$(basename -- "$1").loom-partial"
}

# written_for OPTION PATH: every file loom may write for an output option.
written_for() {
  local option=$1 p=$2 base stem ext valid
  with_temporary "$p"
  [ "$option" = --out ] || return 0
  base=$(basename -- "$p") stem=$base ext=""
  case $base in
    ?*.*) stem=${base%.*} ext=.${base##*.} ;;  # std::filesystem's stem and extension
  esac
  valid=$(dirname -- "$p")/$stem.valid$ext
  with_temporary "$p.json"
  with_temporary "$p.tokenizer.model"
  with_temporary "$valid"
  with_temporary "$valid.json"
}

# unquoted VALUE: a --set value without the TOML string quotes it may carry.
unquoted() {
  local v=$1
  case $v in \"*\") v=${v#\"} v=${v%\"} ;; esac
  printf '%s\n' "$v"
}

output_state() {
  local prev="" a p
  for a in "$@"; do
    case $prev in
      --out|--csv|--svg|--trace|--metrics|--cluster-out)
        written_for "$prev" "$a" | while IFS= read -r p; do file_state "$p"; done ;;
      --set)
        case $a in checkpoint.dir=*) tree_state "$(unquoted "${a#checkpoint.dir=}")" ;; esac ;;
    esac
    case $a in
      --out=*|--csv=*|--svg=*|--trace=*|--metrics=*|--cluster-out=*)
        written_for "${a%%=*}" "${a#*=}" | while IFS= read -r p; do file_state "$p"; done ;;
      --set=checkpoint.dir=*) tree_state "$(unquoted "${a#--set=checkpoint.dir=}")" ;;
    esac
    prev=$a
  done
}

unchanged_state() {
  local dirs dir
  [ -n "${EXPECT_UNCHANGED:-}" ] || return 0
  IFS=: read -ra dirs <<< "$EXPECT_UNCHANGED"
  for dir in "${dirs[@]}"; do
    if [ ! -d "$dir" ] || [ -L "$dir" ]; then
      echo "EXPECT_UNCHANGED = '$EXPECT_UNCHANGED': '$dir' is not a directory, so nothing in it could be seen"
      return 1
    fi
    tree_state "$dir"
  done
}

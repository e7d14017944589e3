#!/usr/bin/env bash
# NOTE [Elastic restart]: a training run that goes on when a host fails. Starts `loom train` on
# the hosts of a hostfile; when the run ends because a host was lost (NOTE [Heartbeat]), it asks
# each host whether it still answers, and starts again on those that do, with --resume auto and a
# layout planned for the new rank count, until the run finishes or fewer than --min-hosts remain.
# A checkpoint resumes in any layout and trains the same model (NOTE [Resuming]), so the weights
# at the end are those of an uninterrupted run.
#
#   scripts/launch-elastic.sh --hostfile FILE [--launcher CMD] [--cluster FILE] [--min-hosts N]
#                             [--restarts K] [--probe-s S] -- TRAIN_ARGS...
#
#   --hostfile   Open MPI's: one "HOST slots=N" line per host (slots default 1)
#   --launcher   the mpirun command, its options included (default: mpirun); the script adds
#                --hostfile (the hosts that remain) and -np (their slots)
#   --cluster    a cluster file of these hosts (`loom profile --cluster-out` run across them): each
#                start's layout is `loom plan --cluster FILE --gpus RANKS`'s choice. Without it the
#                arguments' own layout runs (`parallel.auto = true` plans on one host only)
#   --min-hosts  stop when fewer hosts answer (default 1); --restarts: at most K restarts (10)
#   --probe-s    how long a host has to answer (20 s)
# TRAIN_ARGS are `loom train`'s: -c / --config and --set build the config that is planned; the
# others (--metrics, ...) pass on. checkpoint.dir must be set (the restarts resume from it). The
# loom binary is $LOOM, else `loom` on the PATH. Exit: 0 when the run finished; the run's exit
# code when it failed for another reason than a lost host (bad input, a crash that would recur);
# 1 when too few hosts remain or the restarts ran out.
set -euo pipefail

die() { echo "loom: error: launch-elastic: $*" >&2; exit 2; }
say() { echo "loom: launch-elastic: $*" >&2; }

hostfile="" launcher="mpirun" cluster="" min_hosts=1 restarts=10 probe_s=20
while [ $# -gt 0 ]; do
  case "$1" in --hostfile|--launcher|--cluster|--min-hosts|--restarts|--probe-s)
    [ $# -ge 2 ] || die "$1 needs a value; hint: launch-elastic.sh --hostfile FILE [options] -- TRAIN_ARGS...";;
  esac
  case "$1" in
    --hostfile) hostfile=$2; shift 2;;
    --launcher) launcher=$2; shift 2;;
    --cluster) cluster=$2; shift 2;;
    --min-hosts) min_hosts=$2; shift 2;;
    --restarts) restarts=$2; shift 2;;
    --probe-s) probe_s=$2; shift 2;;
    --) shift; break;;
    *) die "unknown option '$1'; hint: launch-elastic.sh --hostfile FILE [options] -- TRAIN_ARGS...";;
  esac
done
[ -f "$hostfile" ] || die "--hostfile '$hostfile' is not a file; hint: one \"HOST slots=N\" line per host"
for n in "$min_hosts" "$restarts" "$probe_s"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "'$n' is not a count; hint: --min-hosts, --restarts and --probe-s take whole numbers"
done
[ "$min_hosts" -ge 1 ] && [ "$probe_s" -ge 1 ] || die "--min-hosts $min_hosts and --probe-s $probe_s must be 1 or more"
[ -z "$cluster" ] || [ -f "$cluster" ] || die "--cluster '$cluster' is not a file; hint: loom profile --cluster-out FILE across the hosts"
[ $# -gt 0 ] || die "no training arguments; hint: -- -c run.toml --set checkpoint.dir=ckpt"
loom=${LOOM:-loom}
read -ra launch <<< "$launcher"

# The config's arguments (planned) and the others (passed on).
config_args=() run_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -c|--config|--set) [ $# -ge 2 ] || die "$1 needs a value"; config_args+=("$1" "$2"); shift 2;;
    --set=*|--config=*) config_args+=("$1"); shift;;
    --resume) die "--resume is the script's (auto); hint: leave it out";;
    *) run_args+=("$1"); shift;;
  esac
done
# checkpoint.dir: in a --set, or in the config file (loom prints the config it would run).
if ! printf '%s\n' "${config_args[@]}" | grep -qE '(^|=)checkpoint\.dir=' &&
   ! "${LOOM:-loom}" config "${config_args[@]}" --print 2>/dev/null |
     awk '/^\[/ { s = $0 } s == "[checkpoint]" && /^dir = "[^"]/ { f = 1 } END { exit !f }'; then
  die "checkpoint.dir is not set; hint: --set checkpoint.dir=DIR, which every host sees (restarts resume from it)"
fi

state=$(mktemp -d "${TMPDIR:-/tmp}/loom-elastic.XXXXXX")
trap 'rm -rf "$state"' EXIT
mapfile -t hosts < <(grep -vE '^\s*(#|$)' "$hostfile")
[ "${#hosts[@]}" -ge 1 ] || die "--hostfile $hostfile names no host"

slots_of() { [[ "$1" =~ slots=([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo 1; }
ranks_of() { local n=0 h; for h in "$@"; do n=$((n + $(slots_of "$h"))); done; echo "$n"; }

# Whether host line $1 still answers: one process started on it within --probe-s seconds.
answers() {
  printf '%s\n' "$1" > "$state/probe"
  timeout -k 5 "$probe_s" "${launch[@]}" --hostfile "$state/probe" -np 1 true >/dev/null 2>&1
}

# The layout for $1 ranks: the config file to train.
layout_for() {
  if [ -z "$cluster" ]; then
    return 0
  fi
  "$loom" plan "${config_args[@]}" --cluster "$cluster" --gpus "$1" --out "$state/layout-$1.toml" > "$state/plan" 2>&1 ||
    { cat "$state/plan" >&2; die "loom plan found no layout for $1 ranks on $cluster"; }
  # The plan's first row: "1 LAYOUT... STEP_S TOKENS/S MFU PEAK UNIT".
  say "the layout for $1 ranks (loom plan on $cluster): $(awk '$1 == "1" {
    for (i = 2; i <= NF - 5; ++i) printf "%s ", $i; printf "(a step of %s s predicted)", $(NF - 4); exit }' "$state/plan")"
}

start=0
while true; do
  ranks=$(ranks_of "${hosts[@]}")
  printf '%s\n' "${hosts[@]}" > "$state/hosts"
  layout_for "$ranks"
  train=("${config_args[@]}")
  [ -n "$cluster" ] && train=(-c "$state/layout-$ranks.toml")
  say "start $((start + 1)) on ${#hosts[@]} host(s), $ranks ranks"
  rc=0
  "${launch[@]}" --hostfile "$state/hosts" -np "$ranks" "$loom" train "${train[@]}" "${run_args[@]}" --resume auto || rc=$?
  [ "$rc" -eq 0 ] && { say "the run finished"; exit 0; }
  [ "$rc" -eq 2 ] && exit 2  # bad input: loom said why
  remaining=()
  for h in "${hosts[@]}"; do
    if answers "$h"; then remaining+=("$h"); else say "host ${h%% *} does not answer"; fi
  done
  if [ "${#remaining[@]}" -eq "${#hosts[@]}" ]; then
    say "the run ended (exit code $rc) with every host answering: not a lost host, so no restart"
    exit "$rc"
  fi
  if [ "${#remaining[@]}" -lt "$min_hosts" ]; then
    say "${#remaining[@]} host(s) answer, fewer than --min-hosts $min_hosts: giving up"
    exit 1
  fi
  start=$((start + 1))
  [ "$start" -le "$restarts" ] || { say "$restarts restarts done: giving up"; exit 1; }
  hosts=("${remaining[@]}")
done

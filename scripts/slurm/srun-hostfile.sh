#!/usr/bin/env bash
# srun-hostfile.sh --hostfile FILE -np N COMMAND...: starts COMMAND as N tasks of one MPI job on
# the nodes of FILE (Open MPI's hostfile: one "NODE slots=S" line per node), inside the Slurm
# allocation this runs in, as `mpirun --hostfile FILE -np N COMMAND` would: task after task on
# each node in the file's order, up to its slots. It is the launcher that scripts/launch-elastic.sh
# calls under Slurm (scripts/slurm/train-elastic.sbatch, NOTE [Elastic restart]), so the restart
# logic is one script whatever starts the ranks.
#   LOOM_SRUN_MPI   srun's --mpi plugin (default pmix; `srun --mpi=list`)
# srun's --kill-on-bad-exit ends every task when one fails; the exit code is the tasks' highest.
# --overlap: a step may share a node's CPUs with one still ending (a run stopped by a lost node
# whose tasks there Slurm has not yet reaped), so a probe or a restart does not queue behind it.
set -euo pipefail

usage="srun-hostfile.sh --hostfile FILE -np N COMMAND..."
die() { echo "loom: error: srun-hostfile: $*" >&2; exit 2; }
hostfile="" np=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) [ $# -ge 2 ] || die "--hostfile needs a file; hint: $usage"; hostfile=$2; shift 2;;
    -np) [ $# -ge 2 ] || die "-np needs a count; hint: $usage"; np=$2; shift 2;;
    *) break;;
  esac
done
[ -f "$hostfile" ] || die "--hostfile '$hostfile' is not a file; hint: one \"NODE slots=S\" line per node"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "-np '$np' is not a positive count; hint: $usage"
[ $# -gt 0 ] || die "no command; hint: $usage"

# Each task's node: each node repeated for its slots (1 where none is given), the first N.
tasks=$(awk '!/^[[:space:]]*(#|$)/ { s = 1; if (match($0, /slots=[0-9]+/)) s = substr($0, RSTART + 6, RLENGTH - 6) + 0;
             for (i = 0; i < s; ++i) print $1 }' "$hostfile")
have=$(grep -c . <<< "$tasks" || true)
[ "$have" -ge "$np" ] || die "$hostfile has $have slots, fewer than -np $np; hint: more slots, or a smaller -np"
tasks=$(head -n "$np" <<< "$tasks")
nodes=$(awk '!seen[$1]++' <<< "$tasks" | wc -l)
# The node list of an arbitrary distribution names each task's node.
exec srun --mpi="${LOOM_SRUN_MPI:-pmix}" --kill-on-bad-exit=1 --overlap --distribution=arbitrary --nodes="$nodes" \
  --nodelist="$(paste -sd, <<< "$tasks")" --ntasks="$np" "$@"

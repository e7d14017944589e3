#!/usr/bin/env bash
# mpirun.sh NP COMMAND...: runs COMMAND on NP ranks of this machine with Open MPI, adding what
# this environment needs: --allow-run-as-root when run as root, --oversubscribe when NP exceeds
# the cores, and the shared-memory transport without the single-copy mechanism (which containers
# often forbid). On a cluster, use mpirun or srun directly (README).
set -euo pipefail
np=$1
shift
flags=(--bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
[ "$np" -gt "$(nproc)" ] && flags+=(--oversubscribe)
exec mpirun "${flags[@]}" -n "$np" "$@"

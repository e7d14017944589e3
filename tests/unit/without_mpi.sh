#!/usr/bin/env bash
# without_mpi.sh BINARY PEER: BINARY (the planner's tests) loads no MPI library, directly or
# through another; PEER (the CLI, which runs distributed jobs) does, which shows the check can see one.
set -u
mpi_libraries() { ldd "$1" | grep -E 'lib(mpi|open-pal|open-rte|pmix)[._]' ; }
found=$(mpi_libraries "$1")
[ -z "$found" ] || { echo "FAIL: $(basename "$1") loads MPI:"; echo "$found"; exit 1; }
[ -n "$(mpi_libraries "$2")" ] || { echo "FAIL: the check sees no MPI in $(basename "$2") either"; exit 1; }
echo "ok: $(basename "$1") loads no MPI; $(basename "$2") loads $(mpi_libraries "$2" | wc -l) MPI libraries"

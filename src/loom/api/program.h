#pragma once
// NOTE [Program errors]
// The main of a loom program (the CLI's, or one's own: docs/cpp-api.md): starts the runtime (MPI
// when an MPI launcher started the process, a world of one otherwise), runs `body` on every rank
// and turns every error into one line on stderr and an exit code:
//   bad input (InputError)            `loom: error: ...`, exit 2; the ranks agreed on it (input
//                                     agreement) or, refused on one rank alone, that rank ends all
//   an error every rank agreed on     rank 0 prints it, every rank exits with its code
//   any other failure on one rank     `loom: error: [rank R] ...`, and MPI_Abort ends every rank
//                                     with exit 1 (or the error's code): nothing hangs
// LOOM_COMM_TIMEOUT_S sets how long a rank waits for a peer before the job is declared stuck (300 s),
// LOOM_HEARTBEAT_S how long a host may stay silent before it is declared lost (10 s, at least 1; 0:
// off; rank 0's holds for the job; NOTE [Heartbeat]).
#include <functional>

#include "loom/mpi/runtime.h"

namespace loom {

// Returns the exit code for main to return.
int run_program(const std::function<void(dist::Runtime&)>& body);

}  // namespace loom

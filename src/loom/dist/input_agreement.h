#pragma once
// Bad input must end every rank with exit code 2 and one message, before any rank allocates or
// sends. Input checks can fail on some ranks only (a data file missing on one node), so each
// rank runs its checks, then all ranks meet here: if any failed, the lowest failing rank rethrows
// its own InputError (the CLI prints it) and every other rank throws SilentInputError (exit 2,
// not printed). Collective over `world`: every rank calls it exactly once per check phase.
#include <exception>

#include "loom/core/error.h"
#include "loom/dist/communicator.h"

namespace loom::dist {

class SilentInputError : public InputError {
 public:
  using InputError::InputError;
};

// The first failing rank's error after agreement: every other rank threw SilentInputError, so
// printing it and exiting 2 ends the job cleanly. An InputError that is neither went through no
// agreement (one rank only), and the CLI must end the job with MPI_Abort instead.
class AgreedInputError : public InputError {
 public:
  using InputError::InputError;
};

// `failure` holds this rank's InputError, or is null.
void agree_on_input(Communicator& world, std::exception_ptr failure);

}  // namespace loom::dist

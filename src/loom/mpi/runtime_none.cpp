// The Runtime of a build without the MPI backend (LOOM_MPI=OFF, for a machine that has no MPI):
// every process is a world of one. Started by an MPI launcher it refuses, before anything runs:
// each of the launched processes would train alone and write the same outputs.
#include <memory>

#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/mpi/launcher.h"
#include "loom/mpi/runtime.h"

namespace loom::dist {

struct MpiShared {};  // nothing: no MPI

namespace detail {
class Heartbeat {};  // nothing: one process
}  // namespace detail

Runtime::Runtime(double /*timeout_s*/, double /*heartbeat_s*/) : interrupts_(std::make_unique<InterruptHandler>()) {
  const char* launcher = launcher_variable();
  LOOM_CHECK_INPUT(launcher == nullptr,
                   "[dist] this loom was built without MPI (LOOM_MPI=OFF), so it runs as one process, but an MPI "
                   "launcher started it ({} is set): each process would train alone; hint: run it without "
                   "mpiexec or srun, or build loom with MPI (cmake -DLOOM_MPI=ON)",
                   launcher);
  check_srun_has_pmi();
  world_ = std::make_unique<NullCommunicator>();
}

Runtime::~Runtime() = default;

void Runtime::abort_all(int /*code*/) {}  // a world of one: the caller exits as usual

}  // namespace loom::dist

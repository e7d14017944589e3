#include "loom/mpi/launcher.h"

#include <cstdlib>

#include "loom/core/error.h"
#include "loom/mpi/runtime.h"

namespace loom::dist {

const char* launcher_variable() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return var;
  return nullptr;
}

bool launched_by_mpi() { return launcher_variable() != nullptr; }

void check_srun_has_pmi() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");  // set in an srun step, not in the batch script
  LOOM_CHECK_INPUT(tasks == nullptr || std::atoi(tasks) <= 1,
                   "[dist] srun started {} tasks without PMI, so each would run alone as rank 0 of 1; "
                   "hint: srun --mpi=pmix (srun --mpi=list shows the plugins; docs/slurm.md)",
                   tasks);
}

}  // namespace loom::dist

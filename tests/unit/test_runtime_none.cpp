// The Runtime of a build without the MPI backend (LOOM_MPI=OFF): src/loom/mpi/runtime_none.cpp,
// compiled into this binary, which links no MPI (plan.without_mpi). A world of one; started by an
// MPI launcher (as `mpiexec -n 2 loom train` would be) it refuses before anything runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "loom/mpi/runtime.h"
#include "unit/input_error.h"

namespace loom::dist {
namespace {

using ::testing::HasSubstr;

// Sets an environment variable for a scope, and restores what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(RuntimeWithoutMpi, IsAWorldOfOne) {
  Runtime runtime;
  EXPECT_FALSE(runtime.distributed());
  EXPECT_EQ(runtime.world().size(), 1);
  EXPECT_EQ(runtime.world().rank(), 0);
  runtime.abort_all(3);  // a world of one: returns, and the caller exits as usual
}

TEST(RuntimeWithoutMpi, RefusesToRunUnderAnMpiLauncher) {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    SCOPED_TRACE(variable);
    const ScopedVariable launched(variable, "2");
    const std::string error = testing::input_error([] { Runtime runtime; });
    EXPECT_THAT(error, HasSubstr("this loom was built without MPI (LOOM_MPI=OFF)"));
    EXPECT_THAT(error, HasSubstr(std::string(variable) + " is set"));
    EXPECT_THAT(error, HasSubstr("hint: run it without mpiexec or srun"));
  }
}

TEST(RuntimeWithoutMpi, RefusesSrunTasksWithoutPmi) {
  const ScopedVariable tasks("SLURM_STEP_NUM_TASKS", "4");
  EXPECT_THAT(testing::input_error([] { Runtime runtime; }), HasSubstr("srun started 4 tasks without PMI"));
}

}  // namespace
}  // namespace loom::dist

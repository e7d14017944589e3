// Main of the multi-rank tests: run under `mpiexec -n N` by ctest (label `mpi`). Each rank runs
// every test; gtest output is kept for rank 0 only, and the exit code is the worst over ranks,
// so a failure anywhere fails the test.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "loom/mpi/runtime.h"
#include "selected_tests.h"
#include "world.h"

namespace {
loom::dist::Runtime* g_runtime = nullptr;

// On ranks other than 0: print only failures, prefixed with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

loom::dist::Communicator& loom::test::world() { return g_runtime->world(); }

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  loom::dist::Runtime runtime(/*timeout_s=*/60);
  g_runtime = &runtime;
  // A launcher that failed to join the processes into one job leaves each a world of one, where
  // every layout test would pass against itself: ctest states the size it launched.
  if (const char* want = std::getenv("LOOM_TEST_WORLD_SIZE"); want != nullptr && std::stoi(want) != runtime.world().size()) {
    std::fprintf(stderr, "loom dist tests: launched as %s ranks, but the world has %d\n", want, runtime.world().size());
    return 1;
  }
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (runtime.world().rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(runtime.world().rank()));
  }
  int failed = RUN_ALL_TESTS();
  if (loom::test::selected_no_test("loom dist tests")) failed = 1;
  at::Tensor flag = at::full({1}, static_cast<int64_t>(failed), at::kLong);
  runtime.world().all_reduce(flag, loom::dist::ReduceOp::Max);
  // LOOM_SKIPPED_EXIT=77 (a suite that may skip as a whole, ctest's SKIP_RETURN_CODE): that code
  // when no rank failed and every test each ran skipped, so a skip is told by the exit code, never
  // by what a failure's output happens to print.
  if (const char* code = std::getenv("LOOM_SKIPPED_EXIT"); code != nullptr && flag.item<int64_t>() == 0) {
    const testing::UnitTest& u = *testing::UnitTest::GetInstance();
    at::Tensor ran = at::full({1}, static_cast<int64_t>(u.test_to_run_count() - u.skipped_test_count()), at::kLong);
    runtime.world().all_reduce(ran, loom::dist::ReduceOp::Max);
    if (u.test_to_run_count() > 0 && ran.item<int64_t>() == 0) return std::stoi(code);
  }
  return static_cast<int>(flag.item<int64_t>());
}

// The accounting allocator counts every libtorch CPU allocation and enforces the budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "loom/memory/accounting_allocator.h"

namespace loom::memory {
namespace {

using ::testing::HasSubstr;

TEST(AccountingAllocator, CountsLiveAndPeakBytes) {
  install_accounting_allocator();
  const int64_t base = live_bytes();
  reset_peak();
  {
    const at::Tensor a = at::empty({1000}, at::kFloat);      // 4000 bytes
    const at::Tensor b = at::empty({250}, at::kDouble);      // 2000 bytes
    EXPECT_EQ(live_bytes() - base, 6000);
  }
  EXPECT_EQ(live_bytes(), base);
  EXPECT_GE(peak_bytes() - base, 6000);
}

TEST(AccountingAllocator, BudgetTurnsAnOverBudgetAllocationIntoAClearError) {
  install_accounting_allocator();
  const int64_t base = live_bytes();
  set_budget(base + (1 << 20));
  const at::Tensor fits = at::empty({1 << 17}, at::kFloat);  // 512 KiB
  try {
    const at::Tensor too_big = at::empty({1 << 18}, at::kFloat);  // 1 MiB more
    ADD_FAILURE() << "expected BudgetExceeded";
  } catch (const BudgetExceeded& e) {
    EXPECT_THAT(e.what(), HasSubstr("allocating 1.00 MiB"));
    EXPECT_THAT(e.what(), HasSubstr("memory.budget"));
    EXPECT_THAT(e.what(), HasSubstr("in use"));
  }
  set_budget(0);
  EXPECT_EQ(live_bytes() - base, 1 << 19) << "a refused allocation must not count";
}

}  // namespace
}  // namespace loom::memory

#pragma once
// The process-wide CPU allocator loom installs into libtorch: every tensor allocation passes
// through it, so it counts live and peak bytes exactly, and it can enforce a budget (the
// "device memory" of a CPU rank). An allocation that would pass the budget throws
// BudgetExceeded, naming the budget, the request and the current use.
//
// Its counters are process-wide state (libtorch has one CPU allocator per process), as are the
// interrupt flags (dist/interrupt.h, which a signal handler needs); MPI's state belongs to
// dist::Runtime.
#include <cstdint>
#include <string>

#include "loom/core/error.h"

namespace loom::memory {

class BudgetExceeded : public Error {
 public:
  using Error::Error;
};

// The machine refused an allocation (posix_memalign failed).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Idempotent; tensors allocated before the call are freed correctly but not counted.
void install_accounting_allocator();
int64_t live_bytes();
int64_t peak_bytes();
void reset_peak();             // peak := live
void set_budget(int64_t bytes);  // 0 = no budget
int64_t budget();

// What BudgetExceeded's message ends with after "hint: " (the remedies of the run that set the
// budget: the trainer names memory.policy when it is "auto"); kDefaultBudgetHint until set.
inline constexpr const char* kDefaultBudgetHint =
    "raise memory.budget, lower train.micro_batch or set memory.recompute = \"full\"";
void set_budget_hint(std::string hint);

// NOTE [Measurements outside the budget]: memory.budget is the run's, and a measurement the run
// makes about this machine before its first step (the GEMM probe for MFU: three 512 x 512 and
// 1024 x 1024 matrices, 2 and 8 MiB each in float64) is not part of it: the estimate does not
// count it, and under a budget that the plan filled to 90% it failed every rank (issue 33). The
// budget is lifted for its scope and restored on leaving it, also when the scope throws. Only
// while no other thread of the run allocates (before the first step).
class BudgetLifted {
 public:
  BudgetLifted() : saved_(budget()) { set_budget(0); }
  ~BudgetLifted() { set_budget(saved_); }
  BudgetLifted(const BudgetLifted&) = delete;
  BudgetLifted& operator=(const BudgetLifted&) = delete;

 private:
  int64_t saved_;
};

}  // namespace loom::memory

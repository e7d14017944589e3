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

}  // namespace loom::memory

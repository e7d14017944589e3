#pragma once
// The memory this machine gives the job: physical memory, or the control group's limit when that
// is lower (a container, a batch system's allocation). The up-front memory check without a
// memory.budget compares a run's estimate per rank with host_memory_bytes() / ranks on the machine.
#include <cstdint>

namespace loom::memory {

int64_t host_memory_bytes();

}  // namespace loom::memory

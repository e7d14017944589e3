#pragma once
// The CUDA runtime's errors as loom's (inside the cuda folder only: it needs the toolkit's header).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "loom/core/error.h"

namespace loom::cuda {

inline void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("CUDA: {} failed: {}", what, cudaGetErrorString(rc)));
}

}  // namespace loom::cuda

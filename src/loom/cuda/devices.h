#pragma once
// loom's own CUDA code (LOOM_CUDA, cmake/cuda.cmake): what this build and this machine offer, and
// one trivial kernel that proves the toolkit compiles and links loom's device code and runs it where
// a GPU exists. The GPU backend (NCCL, device tensors) builds on this folder.
#include <cstdint>
#include <string>
#include <vector>

namespace loom::cuda {

struct Devices {
  int count = 0;         // GPUs this process can use
  std::string why_none;  // when count is 0: why ("loom was built without CUDA", the runtime's reason)
};

// Never throws: a build without CUDA, or a machine without a driver or GPU, has none.
Devices devices();

// x * a computed on GPU 0 by loom's own kernel (copied there and back). Throws loom::Error where
// devices() has none.
std::vector<float> scaled_on_device(const std::vector<float>& x, float a);

}  // namespace loom::cuda

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

// Loads libtorch's CUDA half (libtorch_cuda: its CUDA kernels, cuBLAS, cuDNN) into this process,
// once: loom links libtorch's CPU library alone, so that a CPU run does not pay its start-up time
// and memory (cmake/torch.cmake); a rank that trains on a GPU loads it first. Returns "" when it
// is loaded, else why not (a build without CUDA, the library missing or refusing to load).
std::string load_torch_cuda();

// Waits until the work queued on `gpu` (every stream) has run. Throws loom::Error where this
// build has no CUDA, and on the device's error.
void synchronize(int gpu);

// x * a computed on GPU 0 by loom's own kernel (copied there and back). Throws loom::Error where
// devices() has none.
std::vector<float> scaled_on_device(const std::vector<float>& x, float a);

}  // namespace loom::cuda

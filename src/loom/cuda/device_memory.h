#pragma once
// NOTE [Device memory]
// A GPU rank's tensors live in libtorch's CUDA caching allocator (in libc10_cuda, which loom links:
// 0.7 MB, no kernels). Its figures are what a GPU run reports as its memory: the bytes its tensors
// hold now and at most since the last reset, on the rank's GPU, not the memory the allocator has
// reserved from the driver (its cache) nor what other processes hold. Asked for only once the rank
// has made a tensor on that GPU (the allocator starts with libtorch's CUDA).
#include <cstdint>

namespace loom::cuda {

struct DeviceMemory {
  int64_t live = 0;  // bytes the rank's tensors hold on the GPU now
  int64_t peak = 0;  // the most they held since reset_device_peak
};

// Throws loom::Error where this build has no CUDA.
DeviceMemory device_memory(int gpu);
void reset_device_peak(int gpu);

}  // namespace loom::cuda

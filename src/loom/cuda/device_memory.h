#pragma once
// NOTE [Device memory]
// A GPU rank's tensors live in libtorch's CUDA caching allocator (in libc10_cuda, which loom links:
// 0.7 MB, no kernels). Its figures are what a GPU run reports as its memory: the most bytes its
// tensors held since the last reset, on the rank's GPU, not the memory the allocator has
// reserved from the driver (its cache) nor what other processes hold. Asked for only once the rank
// has made a tensor on that GPU (the allocator starts with libtorch's CUDA).
//
// memory.budget on a GPU is the allocator's memory fraction of the GPU: past it, an allocation
// fails with libtorch's out-of-memory error, which the trainer names as the budget's. The fraction
// bounds what the allocator reserves (its cache included), so it is stricter than the bytes
// tensors hold.
#include <cstdint>

namespace loom::cuda {

// The most bytes the rank's tensors held on `gpu` since reset_device_peak. Throws loom::Error where
// this build has no CUDA.
int64_t device_peak_bytes(int gpu);
void reset_device_peak(int gpu);
// The bytes the rank's tensors hold on `gpu` now.
int64_t device_live_bytes(int gpu);
// The GPU's memory in bytes, as the driver reports it.
int64_t device_total_bytes(int gpu);
// Bounds what the allocator may reserve on `gpu` to `bytes` (0: the whole GPU again).
void set_device_budget(int gpu, int64_t bytes);

}  // namespace loom::cuda

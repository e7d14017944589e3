// NOTE [Device memory]: libtorch's CUDA caching allocator's statistics.
#include "loom/cuda/device_memory.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/cuda/cuda_check.h"

namespace loom::cuda {

int64_t device_peak_bytes(int gpu) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(gpu));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

int64_t device_live_bytes(int gpu) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(gpu));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

void reset_device_peak(int gpu) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(gpu));
}

int64_t device_total_bytes(int gpu) {
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, gpu), "cudaGetDeviceProperties");
  return static_cast<int64_t>(props.totalGlobalMem);
}

void set_device_budget(int gpu, int64_t bytes) {
  const auto index = static_cast<c10::DeviceIndex>(gpu);
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA, index));  // the allocator starts with a first tensor
  const double total = static_cast<double>(device_total_bytes(gpu));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(bytes > 0 ? static_cast<double>(bytes) / total : 1.0, index);
}

}  // namespace loom::cuda

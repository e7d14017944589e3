// NOTE [Device memory]: libtorch's CUDA caching allocator's statistics.
#include "loom/cuda/device_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace loom::cuda {
namespace {

const c10::CachingAllocator::Stat& allocated(const c10::CachingDeviceAllocator::DeviceStats& stats) {
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}

}  // namespace

DeviceMemory device_memory(int gpu) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(gpu));
  return {.live = allocated(stats).current, .peak = allocated(stats).peak};
}

void reset_device_peak(int gpu) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(gpu));
}

}  // namespace loom::cuda

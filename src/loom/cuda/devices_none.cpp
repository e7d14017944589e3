// loom built without CUDA (LOOM_CUDA=off, or auto where libtorch has no CUDA or nvcc is missing).
#include "loom/core/error.h"
#include "loom/cuda/device_memory.h"
#include "loom/cuda/devices.h"
#include "loom/cuda/event_clock.h"
#include "loom/cuda/pinned_swap_tier.h"

namespace loom::cuda {

namespace {
constexpr const char* kNone = "loom was built without CUDA (LOOM_CUDA=" LOOM_CUDA_SETTING ")";
}

Devices devices() { return {.count = 0, .why_none = kNone}; }

std::string load_torch_cuda() { return kNone; }

void synchronize(int) { throw Error(kNone); }

std::vector<float> scaled_on_device(const std::vector<float>&, float) { throw Error(kNone); }

int64_t device_peak_bytes(int) { throw Error(kNone); }

void reset_device_peak(int) { throw Error(kNone); }

int64_t device_live_bytes(int) { throw Error(kNone); }

int64_t device_total_bytes(int) { throw Error(kNone); }

void set_device_budget(int, int64_t) { throw Error(kNone); }

std::unique_ptr<StepClock> make_event_clock(int) { throw Error(kNone); }

std::unique_ptr<memory::SwapTier> make_pinned_swap_tier(int) { throw Error(kNone); }

}  // namespace loom::cuda

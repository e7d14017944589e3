// NOTE [Step clock]: a GPU's, by CUDA events.
#include "loom/cuda/event_clock.h"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <vector>

#include "loom/core/error.h"
#include "loom/cuda/cuda_check.h"

namespace loom::cuda {
namespace {

class EventClock final : public StepClock {
 public:
  explicit EventClock(int gpu) : gpu_(gpu) { anchor_ = make_event(); }
  ~EventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaEventDestroy(anchor_);
  }
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  size_t mark() override {
    if (used_ == events_.size()) events_.push_back(make_event());
    check(cudaEventRecord(events_[used_], stream()), "cudaEventRecord");
    return used_++;
  }

  std::vector<Clock::time_point> settle() override {
    check(cudaEventRecord(anchor_, stream()), "cudaEventRecord");
    check(cudaEventSynchronize(anchor_), "cudaEventSynchronize");
    const Clock::time_point now = Clock::now();
    std::vector<Clock::time_point> at;
    at.reserve(used_);
    for (size_t i = 0; i < used_; ++i) {
      float ms = 0;  // from the mark to the anchor
      check(cudaEventElapsedTime(&ms, events_[i], anchor_), "cudaEventElapsedTime");
      at.push_back(now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms)));
    }
    used_ = 0;
    return at;
  }

  void discard() override { used_ = 0; }

 private:
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(gpu_)).stream(); }
  cudaEvent_t make_event() const {
    check(cudaSetDevice(gpu_), "cudaSetDevice");
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }

  int gpu_;
  cudaEvent_t anchor_ = nullptr;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<StepClock> make_event_clock(int gpu) { return std::make_unique<EventClock>(gpu); }

}  // namespace loom::cuda

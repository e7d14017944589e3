// NOTE [Step clock]: the CPU's clock.
#include "loom/core/step_clock.h"

#include <utility>

namespace loom {
namespace {

class HostClock final : public StepClock {
 public:
  size_t mark() override {
    marks_.push_back(Clock::now());
    return marks_.size() - 1;
  }
  std::vector<Clock::time_point> settle() override { return std::exchange(marks_, {}); }
  void discard() override { marks_.clear(); }

 private:
  std::vector<Clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<StepClock> make_host_clock() { return std::make_unique<HostClock>(); }

}  // namespace loom

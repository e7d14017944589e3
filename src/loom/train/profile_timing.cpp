#include "loom/train/profile_timing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "loom/core/stats.h"
#include "loom/train/devices.h"

namespace loom::train {

void ProfileDevice::wait() const { wait_for_device(placement); }

double seconds_since(ProfileClock::time_point start) {
  constexpr double kShortest = 1e-9;
  return std::max(kShortest, std::chrono::duration<double>(ProfileClock::now() - start).count());
}

double median_time(int64_t repeats, const std::function<void()>& run, const ProfileDevice& device,
                   const std::function<void()>& before) {
  std::vector<double> samples;
  for (int64_t r = 0; r <= repeats; ++r) {
    if (before) before();
    const ProfileClock::time_point start = ProfileClock::now();
    run();
    device.wait();
    if (r > 0) samples.push_back(seconds_since(start));
  }
  return median(samples);
}

void wait_quietly(dist::Communicator& comm) {
  if (comm.size() == 1) return;
  at::Tensor token = at::zeros({1}, at::kFloat);
  const dist::WorkPtr work = comm.all_reduce_async(token, dist::ReduceOp::Sum);
  while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace loom::train

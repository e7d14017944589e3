#pragma once
// How `loom profile` times what it measures (train/profile_run.cpp, train/cluster_run.cpp): on the
// rank's device (NOTE [Devices]), a timer stopped only once the work queued there has run (a GPU
// call returns before its kernels do); the median of repeats after a warm-up; ranks that wait for
// others without taking their cores.
#include <chrono>
#include <cstdint>
#include <functional>

#include "loom/cuda/placement.h"
#include "loom/dist/communicator.h"

namespace loom::train {

struct ProfileDevice {
  cuda::Placement placement;
  c10::Device torch() const { return placement.torch_device(); }
  bool gpu() const { return placement.device == TrainDevice::Cuda; }
  void wait() const;  // until the work queued on the device has run (nothing to wait for on the CPU)
};

using ProfileClock = std::chrono::steady_clock;

// Seconds since `start`, at least the clock's resolution (1 ns): every time in a profile is
// positive (a layer without weights has an empty weight gradient).
double seconds_since(ProfileClock::time_point start);

// Times `run` (and the device's work it queued) once as a warm-up, then `repeats` times; the median.
// `before` (untimed) runs ahead of each.
double median_time(int64_t repeats, const std::function<void()>& run, const ProfileDevice& device,
                   const std::function<void()>& before = {});

// Every rank of `comm` arrives before any leaves, without spinning a core: the ranks that wait
// while others measure must not take the measuring ranks' cores (a blocking barrier polls).
void wait_quietly(dist::Communicator& comm);

}  // namespace loom::train

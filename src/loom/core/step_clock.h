#pragma once
// NOTE [Step clock]: when a step's work happened, on either device.
// On the CPU a layer's pass is done when its call returns, so the host clock times it. On a GPU a
// call only queues kernels on the rank's compute stream and returns long before they run: host
// times would measure the queueing. A StepClock marks points on the timeline of the rank's
// compute work (the host clock's now; on a GPU an event recorded on the compute stream, after what
// was queued so far) and, once the step's work is queued, settles them: waits for that work and
// gives each mark's time on the host's steady clock (a GPU's events measured back from a last
// event that the host saw complete). The pipeline executor times its actions and the trace's spans
// by marks, so busy time, the measured action costs and the trace mean the same on both devices.
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace loom {

class StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~StepClock() = default;
  // A point after the work queued so far; marks are numbered 0, 1, ... from the last settle.
  virtual size_t mark() = 0;
  // Waits for the work the marks follow; their times in mark order; forgets them.
  virtual std::vector<Clock::time_point> settle() = 0;
  // Forgets the marks without waiting (those a failed step left).
  virtual void discard() = 0;
};

// The CPU's: marks are the host clock's now.
std::unique_ptr<StepClock> make_host_clock();

}  // namespace loom

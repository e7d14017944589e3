#pragma once
// NOTE [Swap tier]: where a layer's saved activations go between its forward and its backward
// under the swap memory policy, and the background copy that moves them.
//
// A SwapTier owns two kinds of memory: the "device" memory a rank computes in (budgeted: on this
// CPU build, what the accounting allocator counts against memory.budget) and a host tier,
// accounted separately (host_peak_bytes). The CPU tier's host blocks come from their own pool and
// its copies are memcpy: real memory traffic, no ATen kernel (an ATen copy on a second thread
// starts a second OpenMP team, which slowed the compute thread in the checkpoint writer). A CUDA
// build plugs in pinned host blocks and copies on a side stream, completed by an event: the
// Swapper's contract (copy() returns when the bytes have arrived) stays.
//
// The Swapper runs one copy thread: swap_out copies a group of device tensors to host blocks and
// then drops its references (their budgeted memory is released once nothing else holds them);
// swap_in copies them back into new device tensors. Jobs run in the order they were queued, so a
// swap_in never overtakes its own swap_out. Failures (a budget exceeded while allocating the copy
// back) are rethrown by take().
#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::memory {

class SwapTier {
 public:
  virtual ~SwapTier() = default;
  virtual at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) = 0;    // the host tier
  virtual at::Tensor device_empty(at::IntArrayRef sizes, at::ScalarType dtype) = 0;  // budgeted memory
  // dst and src contiguous, of the same bytes; returns when the bytes have arrived.
  virtual void copy(const at::Tensor& dst, const at::Tensor& src) = 0;
  virtual int64_t host_live_bytes() const = 0;
  virtual int64_t host_peak_bytes() const = 0;
  virtual void reset_host_peak() = 0;
};

// This build's tier: host blocks from a separately accounted pool, memcpy copies.
std::unique_ptr<SwapTier> make_host_tier();

using Clock = std::chrono::steady_clock;

// One group of tensors on its way out and back. What travels is their storages, each once
// (views of one storage, as q, k and v of one projection, come back as views of one storage, with
// their offsets and strides), except a small view of a much larger storage, which travels alone.
struct SwapView {
  size_t block = 0;  // which of the job's blocks holds it
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype = at::kFloat;
};

struct SwapJob {
  std::vector<SwapView> views;     // in the order given to swap_out
  std::vector<at::Tensor> device;  // the blocks as bytes: until swapped out; again after swapped in
  std::vector<at::Tensor> host;
  bool in_queued = false, out_done = false, in_done = false;
  std::exception_ptr failure;
  Clock::time_point out_start, out_end, in_start, in_end;  // for the trace
};
using SwapTicket = std::shared_ptr<SwapJob>;

class Swapper {
 public:
  explicit Swapper(SwapTier& tier);
  ~Swapper();
  Swapper(const Swapper&) = delete;
  Swapper& operator=(const Swapper&) = delete;

  // Queues the copy out of `tensors` (defined ones); the job holds their storages until copied.
  SwapTicket swap_out(std::vector<at::Tensor> tensors);
  // Queues the copy back (a prefetch); a second call does nothing.
  void swap_in(const SwapTicket& ticket);
  // Waits for the copy back (queueing it if it was not) and returns the device tensors, in the
  // order given to swap_out, with their sizes, strides and sharing. Rethrows a failure of either copy.
  std::vector<at::Tensor> take(const SwapTicket& ticket);
  // Waits until the copy out of `ticket` (and so of every job queued before it) has ended.
  void wait_out(const SwapTicket& ticket);
  // Waits until every queued job has run (the step's end).
  void drain();
  SwapTier& tier() { return tier_; }

 private:
  struct Task {
    SwapTicket job;
    bool out;
  };
  void loop();
  void run(Task& task);
  void queue(Task task);

  SwapTier& tier_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Task> tasks_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;  // last
};

}  // namespace loom::memory

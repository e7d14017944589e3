#pragma once
// NOTE [Message progress]: Open MPI's shared-memory transport moves a large message in fragments,
// and only while the sender is inside an MPI call. A stage that posts a send and then computes a
// whole action would hold its neighbour up for that long (measured: gpt-tiny pp=2 1F1B steps
// 1182 ms without any driving, 960 ms testing between layers). This helper thread drives the
// sends in flight while the stage computes: it tests them every 50 us while any is pending and
// sleeps otherwise. Only it touches the pending sends until finish(). Where MPI cannot take calls
// from two threads at once (no MPI_THREAD_MULTIPLE) there is no helper: the stage drives its
// sends itself between layers (`drive`), which is slower but correct.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::pipeline {

class SendProgress {
 public:
  explicit SendProgress(bool helper);  // helper: a thread drives the sends
  ~SendProgress();
  SendProgress(const SendProgress&) = delete;
  SendProgress& operator=(const SendProgress&) = delete;

  void add(dist::WorkPtr work);  // rethrows a failure of an earlier send
  // Without a helper thread: one round of tests, from the stage's own thread.
  void drive();
  // Waits for every send; rethrows what driving them raised.
  void finish();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<dist::WorkPtr> pending_;
  std::exception_ptr failure_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest exists (constructor body)
};

}  // namespace loom::pipeline

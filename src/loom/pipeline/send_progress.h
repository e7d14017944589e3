#pragma once
// NOTE [Message progress]: Open MPI's shared-memory transport moves a large message in fragments,
// and only while the sender is inside an MPI call. A stage that posts a send and then computes a
// whole action would hold its neighbour up for that long (measured: gpt-tiny pp=2 1F1B steps
// 1182 ms without any driving, 960 ms testing between layers). This helper thread drives the
// sends in flight while the stage computes: it tests them every 50 us while any is pending and
// sleeps otherwise. Only it touches the pending sends until finish(). Where MPI cannot take calls
// from two threads at once (no MPI_THREAD_MULTIPLE) there is no helper: the stage drives its
// sends itself between layers (`drive`), which is slower but correct.
// A message also needs its receive posted: one sent while its receiver computes would wait for
// the receiver's next MPI call (a zb-v trace: 2.4 ms from send to arrival, the link alone 0.2
// ms). So the executor posts each receive from another rank as the compute action before it
// starts, and the message moves whenever the receiver is inside MPI meanwhile (its helper testing
// its own sends included): gpt-small pp = 2 (docs/benchmarks.md), steps 0.98x as long under
// zb-h1, zb-v and dualpipe-v, 1.00x under 1F1B, one boundary buffer more per rank. The helper does
// not poll the receives themselves: polling through whole compute actions took 1F1B's step to
// 1.16x on 2 shared cores.
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

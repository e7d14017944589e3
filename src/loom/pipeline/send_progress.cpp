// NOTE [Message progress]: the helper thread that drives a stage's sends.
#include "loom/pipeline/send_progress.h"

#include <chrono>

namespace loom::pipeline {

SendProgress::SendProgress(bool helper) {
  if (helper) thread_ = std::thread([this] { loop(); });
}

SendProgress::~SendProgress() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SendProgress::add(dist::WorkPtr work) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);  // a send failed: stop here, not in a recv
    pending_.push_back(std::move(work));
  }
  wake_.notify_one();
}

void SendProgress::drive() {
  if (thread_.joinable()) return;
  std::erase_if(pending_, [](const dist::WorkPtr& work) { return work->test(); });
}

void SendProgress::finish() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  for (auto& work : pending_) work->wait();
  pending_.clear();
}

void SendProgress::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (pending_.empty() || failure_) {
      wake_.wait(lock);
      continue;
    }
    try {
      std::erase_if(pending_, [](const dist::WorkPtr& work) { return work->test(); });
    } catch (...) {  // reported by the stage's next add() or finish()
      failure_ = std::current_exception();
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
}

}  // namespace loom::pipeline

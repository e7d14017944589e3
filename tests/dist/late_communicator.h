#pragma once
// A communicator whose reductions and gathers deliver late: each one runs on a private buffer, the
// caller's output is filled with NaN at once, and the result is copied in only when the Work is
// waited for (or tested complete), after a pause. Code that reads an output before waiting for it
// reads NaN and the run's numbers show it: a missing wait fails deterministically, not by luck of
// timing. Integer outputs (counts, row ids) are delivered as they are.
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::test {

class LateCommunicator final : public dist::Communicator {
 public:
  LateCommunicator(std::unique_ptr<dist::Communicator> owned, dist::Communicator* inner, int64_t pause_us)
      : owned_(std::move(owned)), inner_(inner), pause_us_(pause_us) {}
  explicit LateCommunicator(dist::Communicator& inner, int64_t pause_us = 200)
      : LateCommunicator(nullptr, &inner, pause_us) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& axis() const override { return inner_->axis(); }
  bool concurrent_progress() const override { return false; }
  int local_ranks() const override { return inner_->local_ranks(); }
  int local_rank() const override { return inner_->local_rank(); }

  dist::WorkPtr all_reduce_async(at::Tensor& t, dist::ReduceOp op) override {
    if (!t.is_floating_point()) return inner_->all_reduce_async(t, op);
    at::Tensor mine = t.clone();
    dist::WorkPtr work = inner_->all_reduce_async(mine, op);
    return late(std::move(work), mine, t);
  }
  dist::WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, dist::ReduceOp op) override {
    if (!out.is_floating_point()) return inner_->reduce_scatter_async(in, out, op);
    at::Tensor mine = at::empty_like(out);
    dist::WorkPtr work = inner_->reduce_scatter_async(in, mine, op);
    return late(std::move(work), mine, out);
  }
  dist::WorkPtr all_gather_async(const at::Tensor& in, at::Tensor& out) override {
    if (!out.is_floating_point()) return inner_->all_gather_async(in, out);
    at::Tensor mine = at::empty_like(out);
    dist::WorkPtr work = inner_->all_gather_async(in, mine);
    return late(std::move(work), mine, out);
  }
  dist::WorkPtr all_to_all_async(const at::Tensor& in, at::Tensor& out) override {
    return inner_->all_to_all_async(in, out);
  }
  dist::WorkPtr all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor& out,
                                  const std::vector<int64_t>& recv_counts) override {
    return inner_->all_to_allv_async(in, send_counts, out, recv_counts);
  }
  dist::WorkPtr broadcast_async(at::Tensor& t, int root) override { return inner_->broadcast_async(t, root); }
  dist::WorkPtr send_async(const at::Tensor& t, int peer, int tag) override { return inner_->send_async(t, peer, tag); }
  dist::WorkPtr recv_async(at::Tensor& t, int peer, int tag) override { return inner_->recv_async(t, peer, tag); }
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<dist::Communicator> split(int color, int key, const std::string& axis) override {
    std::unique_ptr<dist::Communicator> part = inner_->split(color, key, axis);
    dist::Communicator* raw = part.get();
    return std::make_unique<LateCommunicator>(std::move(part), raw, pause_us_);
  }

 private:
  class LateWork final : public dist::Work {
   public:
    LateWork(dist::WorkPtr inner, at::Tensor mine, at::Tensor out, int64_t pause_us)
        : inner_(std::move(inner)), mine_(std::move(mine)), out_(std::move(out)), pause_us_(pause_us) {}
    void wait() override {
      inner_->wait();
      deliver();
    }
    bool test() override {
      if (!inner_->test()) return false;
      deliver();
      return true;
    }

   private:
    void deliver() {
      if (!mine_.defined()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us_));
      out_.copy_(mine_);
      mine_.reset();
    }
    dist::WorkPtr inner_;
    at::Tensor mine_, out_;
    int64_t pause_us_;
  };

  dist::WorkPtr late(dist::WorkPtr work, const at::Tensor& mine, at::Tensor& out) {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
    return std::make_unique<LateWork>(std::move(work), mine, out, pause_us_);
  }

  std::unique_ptr<dist::Communicator> owned_;
  dist::Communicator* inner_;
  int64_t pause_us_;
};

}  // namespace loom::test

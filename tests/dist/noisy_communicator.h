#pragma once
// A communicator that forwards to another and, after each operation completes on this rank,
// sleeps a random while drawn from this rank's own generator: timing noise that differs from rank
// to rank, as a loaded machine's does. A choice made from local timings alone would then differ
// between ranks; loom's measured choices (NOTE [Table paths]) must agree anyway. The numbers are
// untouched: only the clock sees the noise.
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::test {

class NoisyCommunicator final : public dist::Communicator {
 public:
  // Each completion sleeps uniformly in [0, max_us x (rank + 1)] microseconds.
  NoisyCommunicator(std::unique_ptr<dist::Communicator> owned, dist::Communicator* inner, int64_t max_us, uint64_t seed)
      : owned_(std::move(owned)), inner_(inner), max_us_(max_us),
        rng_(std::make_shared<std::mt19937_64>(seed * 7919 + static_cast<uint64_t>(inner->rank()))) {}
  NoisyCommunicator(dist::Communicator& inner, int64_t max_us, uint64_t seed = 1)
      : NoisyCommunicator(nullptr, &inner, max_us, seed) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& axis() const override { return inner_->axis(); }
  bool concurrent_progress() const override { return false; }  // one generator, one thread
  int local_ranks() const override { return inner_->local_ranks(); }

  dist::WorkPtr all_reduce_async(at::Tensor& t, dist::ReduceOp op) override {
    return noisy(inner_->all_reduce_async(t, op));
  }
  dist::WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, dist::ReduceOp op) override {
    return noisy(inner_->reduce_scatter_async(in, out, op));
  }
  dist::WorkPtr all_gather_async(const at::Tensor& in, at::Tensor& out) override {
    return noisy(inner_->all_gather_async(in, out));
  }
  dist::WorkPtr all_to_all_async(const at::Tensor& in, at::Tensor& out) override {
    return noisy(inner_->all_to_all_async(in, out));
  }
  dist::WorkPtr all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor& out,
                                  const std::vector<int64_t>& recv_counts) override {
    return noisy(inner_->all_to_allv_async(in, send_counts, out, recv_counts));
  }
  dist::WorkPtr broadcast_async(at::Tensor& t, int root) override { return noisy(inner_->broadcast_async(t, root)); }
  dist::WorkPtr send_async(const at::Tensor& t, int peer, int tag) override {
    return noisy(inner_->send_async(t, peer, tag));
  }
  dist::WorkPtr recv_async(at::Tensor& t, int peer, int tag) override {
    return noisy(inner_->recv_async(t, peer, tag));
  }
  void barrier() override {
    inner_->barrier();
    sleep();
  }
  std::unique_ptr<dist::Communicator> split(int color, int key, const std::string& axis) override {
    std::unique_ptr<dist::Communicator> part = inner_->split(color, key, axis);
    dist::Communicator* raw = part.get();
    return std::make_unique<NoisyCommunicator>(std::move(part), raw, max_us_, (*rng_)());
  }

 private:
  // The inner work, then the noise, once, when it is first seen complete.
  class NoisyWork final : public dist::Work {
   public:
    NoisyWork(dist::WorkPtr inner, NoisyCommunicator& owner) : inner_(std::move(inner)), owner_(owner) {}
    void wait() override {
      inner_->wait();
      done();
    }
    bool test() override {
      if (!inner_->test()) return false;
      done();
      return true;
    }

   private:
    void done() {
      if (!slept_) owner_.sleep();
      slept_ = true;
    }
    dist::WorkPtr inner_;
    NoisyCommunicator& owner_;
    bool slept_ = false;
  };

  dist::WorkPtr noisy(dist::WorkPtr inner) { return std::make_unique<NoisyWork>(std::move(inner), *this); }
  void sleep() {
    std::uniform_int_distribution<int64_t> us(0, max_us_ * (inner_->rank() + 1));
    std::this_thread::sleep_for(std::chrono::microseconds(us(*rng_)));
  }

  std::unique_ptr<dist::Communicator> owned_;
  dist::Communicator* inner_;
  int64_t max_us_;
  std::shared_ptr<std::mt19937_64> rng_;
};

}  // namespace loom::test

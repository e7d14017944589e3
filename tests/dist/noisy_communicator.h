#pragma once
// A communicator that forwards to another and, after each operation completes on this rank,
// sleeps a while of this rank's own: random (its own generator), and long for one family of
// operations chosen by the rank's parity: the exchanges (all-to-all, all-to-all-v, send, receive)
// on even ranks, the reductions and gathers on odd ones. Each rank's own clock then ranks the
// sparse path (exchanges) and the dense one (all-reduce) oppositely to its neighbour's, as a loaded
// machine can; loom's measured choices (NOTE [Table paths]) must agree anyway. The numbers are
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
  // Each completion sleeps uniformly in [0, max_us] microseconds, plus 5 x max_us for the rank's
  // slow family.
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
  int local_rank() const override { return inner_->local_rank(); }

  dist::WorkPtr all_reduce_async(at::Tensor& t, dist::ReduceOp op) override {
    return noisy(inner_->all_reduce_async(t, op), kReduction);
  }
  dist::WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, dist::ReduceOp op) override {
    return noisy(inner_->reduce_scatter_async(in, out, op), kReduction);
  }
  dist::WorkPtr all_gather_async(const at::Tensor& in, at::Tensor& out) override {
    return noisy(inner_->all_gather_async(in, out), kReduction);
  }
  dist::WorkPtr all_to_all_async(const at::Tensor& in, at::Tensor& out) override {
    return noisy(inner_->all_to_all_async(in, out), kExchange);
  }
  dist::WorkPtr all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor& out,
                                  const std::vector<int64_t>& recv_counts) override {
    return noisy(inner_->all_to_allv_async(in, send_counts, out, recv_counts), kExchange);
  }
  dist::WorkPtr broadcast_async(at::Tensor& t, int root) override {
    return noisy(inner_->broadcast_async(t, root), kReduction);
  }
  dist::WorkPtr send_async(const at::Tensor& t, int peer, int tag) override {
    return noisy(inner_->send_async(t, peer, tag), kExchange);
  }
  dist::WorkPtr recv_async(at::Tensor& t, int peer, int tag) override {
    return noisy(inner_->recv_async(t, peer, tag), kExchange);
  }
  void barrier() override {
    inner_->barrier();
    sleep(kReduction);
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
    NoisyWork(dist::WorkPtr inner, NoisyCommunicator& owner, bool exchange)
        : inner_(std::move(inner)), owner_(owner), exchange_(exchange) {}
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
      if (!slept_) owner_.sleep(exchange_);
      slept_ = true;
    }
    dist::WorkPtr inner_;
    NoisyCommunicator& owner_;
    bool exchange_;
    bool slept_ = false;
  };

  static constexpr bool kExchange = true, kReduction = false;
  dist::WorkPtr noisy(dist::WorkPtr inner, bool exchange) {
    return std::make_unique<NoisyWork>(std::move(inner), *this, exchange);
  }
  void sleep(bool exchange) {
    std::uniform_int_distribution<int64_t> us(0, max_us_);
    const bool slow = exchange == (inner_->rank() % 2 == 0);
    std::this_thread::sleep_for(std::chrono::microseconds(us(*rng_) + (slow ? 5 * max_us_ : 0)));
  }

  std::unique_ptr<dist::Communicator> owned_;
  dist::Communicator* inner_;
  int64_t max_us_;
  std::shared_ptr<std::mt19937_64> rng_;
};

}  // namespace loom::test

#include "loom/dist/hierarchical.h"

#include <algorithm>
#include <map>

namespace loom::dist {
namespace {

ReduceOp step_op(ReduceOp op) { return op == ReduceOp::Avg ? ReduceOp::Sum : op; }

}  // namespace

// One all-reduce through the levels: its step (0 reduce-scatter, 1 all-reduce across the hosts,
// 2 all-gather, 3 done) and the Work of the step under way.
class LevelsWork final : public Work {
 public:
  LevelsWork(HostLevels& levels, at::Tensor& t, ReduceOp op) : levels_(levels), t_(t), op_(op) {
    const int64_t l = levels.node->size(), n = t.numel(), per = (n + l - 1) / l;
    whole_ = t;
    if (per * l != n) {  // L equal pieces: padded with zeros, which change no sum or maximum kept
      whole_ = at::zeros({per * l}, t.options());
      whole_.narrow(0, 0, n).copy_(t.reshape({-1}));
    }
    piece_ = at::empty({per}, t.options());
    const std::lock_guard lock(levels_.mutex);
    current_ = levels_.node->reduce_scatter_async(whole_, piece_, step_op(op));
    levels_.flight.push_back(this);
  }
  ~LevelsWork() override {  // unfinished only while an error unwinds: its step is abandoned
    const std::lock_guard lock(levels_.mutex);
    std::erase(levels_.flight, this);
  }
  LevelsWork(const LevelsWork&) = delete;
  LevelsWork& operator=(const LevelsWork&) = delete;

  bool test() override {
    const std::lock_guard lock(levels_.mutex);
    while (advance(levels_, false)) {
    }
    return step_ == 3;
  }
  void wait() override {
    const std::lock_guard lock(levels_.mutex);
    while (step_ < 3) advance(levels_, true);
  }

 private:
  // Under the mutex: the oldest all-reduce one step on, once its step under way is done (waited
  // for when `block`); false when nothing moved.
  static bool advance(HostLevels& levels, bool block) {
    if (levels.flight.empty()) return false;
    LevelsWork& head = *levels.flight.front();
    if (block) {
      head.current_->wait();
    } else if (!head.current_->test()) {
      return false;
    }
    head.next();
    if (head.step_ == 3) levels.flight.pop_front();
    return true;
  }
  void next() {
    ++step_;
    if (step_ == 1) {
      current_ = levels_.cross->all_reduce_async(piece_, step_op(op_));
    } else if (step_ == 2) {
      current_ = levels_.node_gather->all_gather_async(piece_, whole_);
    } else {
      current_.reset();
      if (!whole_.is_same(t_)) t_.copy_(whole_.narrow(0, 0, t_.numel()).view(t_.sizes()));
      if (op_ == ReduceOp::Avg) t_.div_(levels_.size);
    }
  }

  HostLevels& levels_;
  at::Tensor t_, whole_, piece_;
  ReduceOp op_;
  int step_ = 0;
  WorkPtr current_;
};

std::unique_ptr<HostLevels> host_levels(Communicator& group, int host) {
  if (group.size() < 4) return nullptr;  // 2 hosts x 2 ranks at least
  at::Tensor mine = at::full({1}, host, at::kLong), all = at::empty({group.size()}, at::kLong);
  group.all_gather(mine, all);
  std::map<int64_t, int> ranks_on;  // host -> the group's ranks there
  int index = 0;                    // this rank's among its host's
  for (int r = 0; r < group.size(); ++r) {
    const int64_t h = all[r].item<int64_t>();
    if (h == host && r < group.rank()) ++index;
    ++ranks_on[h];
  }
  const int per = ranks_on.begin()->second;
  const bool even = std::all_of(ranks_on.begin(), ranks_on.end(), [per](const auto& e) { return e.second == per; });
  if (ranks_on.size() < 2 || per < 2 || !even) return nullptr;
  auto levels = std::make_unique<HostLevels>();
  levels->node = group.split(host, group.rank(), group.axis() + " within a host");
  levels->node_gather = group.split(host, group.rank(), group.axis() + " within a host");
  levels->cross = group.split(index, group.rank(), group.axis() + " across hosts");
  levels->size = group.size();
  return levels;
}

void hierarchical_all_reduce(HostLevels& levels, at::Tensor& t, ReduceOp op) {
  // Through the queue: an all-reduce started earlier and not yet waited for goes first (NOTE).
  LevelsWork(levels, t, op).wait();
}

WorkPtr hierarchical_all_reduce_async(HostLevels& levels, at::Tensor& t, ReduceOp op) {
  return std::make_unique<LevelsWork>(levels, t, op);
}

}  // namespace loom::dist

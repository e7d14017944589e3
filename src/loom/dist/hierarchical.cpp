#include "loom/dist/hierarchical.h"

#include <algorithm>
#include <map>

namespace loom::dist {
namespace {

ReduceOp step_op(ReduceOp op) { return op == ReduceOp::Avg ? ReduceOp::Sum : op; }

// An average divided, once the sum is in.
void divide(at::Tensor& t, ReduceOp op, int size) {
  if (op == ReduceOp::Avg) t.div_(size);
}

}  // namespace

// One all-reduce through the levels: its step (0 within the host, 1 across the hosts' leaders,
// 2 the leader's broadcast, 3 done) and the Work of the step under way.
class LevelsWork final : public Work {
 public:
  LevelsWork(std::shared_ptr<HostLevels> owner, at::Tensor& t, ReduceOp op)
      : owner_(std::move(owner)), levels_(*owner_), t_(t), op_(op) {
    const std::lock_guard lock(levels_.mutex);
    current_ = levels_.node->all_reduce_async(t_, step_op(op));
    levels_.flight.push_back(this);
  }
  ~LevelsWork() override {  // unfinished only while an error unwinds: its step is abandoned
    const std::lock_guard lock(levels_.mutex);
    std::erase(levels_.flight, this);
  }
  LevelsWork(const LevelsWork&) = delete;
  LevelsWork& operator=(const LevelsWork&) = delete;

  // Under the mutex: every all-reduce of the group under way finished, oldest first.
  static void finish_all(HostLevels& levels) {
    while (advance(levels, true)) {
    }
  }

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
      current_ = levels_.cross ? levels_.cross->all_reduce_async(t_, step_op(op_)) : std::make_unique<DoneWork>();
    } else if (step_ == 2) {
      current_ = levels_.node_share->broadcast_async(t_, 0);
    } else {
      current_.reset();
      divide(t_, op_, levels_.size);
    }
  }

  std::shared_ptr<HostLevels> owner_;
  HostLevels& levels_;
  at::Tensor t_;
  ReduceOp op_;
  int step_ = 0;
  WorkPtr current_;
};

std::shared_ptr<HostLevels> host_levels(Communicator& group, int host) {
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
  auto levels = std::make_shared<HostLevels>();
  levels->node = group.split(host, group.rank(), group.axis() + " within a host");  // its rank 0: the leader
  levels->node_share = group.split(host, group.rank(), group.axis() + " within a host");
  std::unique_ptr<Communicator> cross = group.split(index, group.rank(), group.axis() + " across hosts");
  if (index == 0) levels->cross = std::move(cross);
  levels->size = group.size();
  return levels;
}

void hierarchical_all_reduce(HostLevels& levels, at::Tensor& t, ReduceOp op) {
  const std::lock_guard lock(levels.mutex);
  LevelsWork::finish_all(levels);  // the group's earlier all-reduces first: one order on every rank
  levels.node->all_reduce(t, step_op(op));
  if (levels.cross) levels.cross->all_reduce(t, step_op(op));
  levels.node_share->broadcast(t, 0);
  divide(t, op, levels.size);
}

WorkPtr hierarchical_all_reduce_async(const std::shared_ptr<HostLevels>& levels, at::Tensor& t, ReduceOp op) {
  return std::make_unique<LevelsWork>(levels, t, op);
}

}  // namespace loom::dist

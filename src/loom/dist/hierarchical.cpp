#include "loom/dist/hierarchical.h"

#include <algorithm>
#include <map>

namespace loom::dist {
namespace {

ReduceOp step_op(ReduceOp op) { return op == ReduceOp::Avg ? ReduceOp::Sum : op; }

constexpr int kDone = 3;  // a piece's step once broadcast (0 within the host, 1 across, 2 broadcast)

}  // namespace

// One all-reduce through the levels, cut into pieces; each piece's step and the Work of its step
// under way. Every piece's first step is posted as the all-reduce starts; a piece posts its next
// step once its own is done and the piece before it (in this all-reduce or the older one before)
// has posted that step, so each communicator sees the pieces in one order on every rank.
class LevelsWork final : public Work {
 public:
  LevelsWork(std::shared_ptr<HostLevels> owner, at::Tensor& t, ReduceOp op)
      : owner_(std::move(owner)), levels_(*owner_), op_(op) {
    const at::Tensor flat = t.view({-1});
    const int64_t per = std::max<int64_t>(1, levels_.piece_bytes / t.element_size());
    const std::lock_guard lock(levels_.mutex);
    for (int64_t start = 0; start < flat.numel(); start += per) {
      Piece& p = pieces_.emplace_back(Piece{.part = flat.narrow(0, start, std::min(per, flat.numel() - start))});
      p.current = levels_.node->all_reduce_async(p.part, step_op(op_));
    }
    levels_.flight.push_back(this);
  }
  ~LevelsWork() override {  // unfinished only while an error unwinds: its steps are abandoned
    const std::lock_guard lock(levels_.mutex);
    std::erase(levels_.flight, this);
  }
  LevelsWork(const LevelsWork&) = delete;
  LevelsWork& operator=(const LevelsWork&) = delete;

  bool test() override {
    const std::lock_guard lock(levels_.mutex);
    advance(levels_);
    return done();
  }
  // Moves every piece that can move; where none can, waits on the oldest piece's step (the one
  // nothing else holds back), whose Work bounds the wait (the communicator's time-out).
  void wait() override {
    const std::lock_guard lock(levels_.mutex);
    while (!done()) {
      if (!advance(levels_)) levels_.flight.front()->oldest().current->wait();
    }
  }

 private:
  struct Piece {
    at::Tensor part;  // a view of the buffer
    int step = 0;
    WorkPtr current;
  };

  bool done() const { return finished_ == pieces_.size(); }
  Piece& oldest() { return pieces_[finished_]; }

  // Under the mutex: every piece of the group's all-reduces under way moved on as far as the order
  // allows; false when none moved. Steps never rise along the order, so past a piece at step 0 none
  // can move.
  static bool advance(HostLevels& levels) {
    bool moved = false;
    int before = kDone;  // the step the piece before has posted (none before the oldest)
    for (size_t w = 0; w < levels.flight.size() && before > 0;) {
      LevelsWork& work = *levels.flight[w];
      for (size_t i = work.finished_; i < work.pieces_.size() && before > 0; ++i) {
        Piece& p = work.pieces_[i];
        while (p.step < kDone && before > p.step && p.current->test()) {
          work.next(p);
          moved = true;
        }
        before = p.step;
      }
      while (!work.done() && work.oldest().step == kDone) ++work.finished_;
      if (work.done()) {
        levels.flight.erase(levels.flight.begin() + static_cast<std::ptrdiff_t>(w));
      } else {
        ++w;
      }
    }
    return moved;
  }

  void next(Piece& p) {
    ++p.step;
    if (p.step == 1) {
      p.current = levels_.cross ? levels_.cross->all_reduce_async(p.part, step_op(op_)) : std::make_unique<DoneWork>();
    } else if (p.step == 2) {
      p.current = levels_.node_share->broadcast_async(p.part, 0);
    } else {
      p.current.reset();
      if (op_ == ReduceOp::Avg) p.part.div_(levels_.size);
    }
  }

  std::shared_ptr<HostLevels> owner_;
  HostLevels& levels_;
  ReduceOp op_;
  std::vector<Piece> pieces_;  // views of the buffer, which keep it alive
  size_t finished_ = 0;  // pieces_[0, finished_) are done
};

int64_t levels_hosts(const std::map<int64_t, int64_t>& ranks_on) {
  if (ranks_on.size() < 2) return 0;
  const int64_t per = ranks_on.begin()->second;
  const bool even = std::all_of(ranks_on.begin(), ranks_on.end(), [per](const auto& e) { return e.second == per; });
  return per >= 2 && even ? static_cast<int64_t>(ranks_on.size()) : 0;
}

std::shared_ptr<HostLevels> host_levels(Communicator& group, int host, int64_t piece_bytes) {
  if (group.size() < 4) return nullptr;  // 2 hosts x 2 ranks at least
  at::Tensor mine = at::full({1}, host, at::kLong), all = at::empty({group.size()}, at::kLong);
  group.all_gather(mine, all);
  std::map<int64_t, int64_t> ranks_on;  // host -> the group's ranks there
  int index = 0;                    // this rank's among its host's
  for (int r = 0; r < group.size(); ++r) {
    const int64_t h = all[r].item<int64_t>();
    if (h == host && r < group.rank()) ++index;
    ++ranks_on[h];
  }
  if (levels_hosts(ranks_on) == 0) return nullptr;
  auto levels = std::make_shared<HostLevels>();
  levels->node = group.split(host, group.rank(), group.axis() + " within a host");  // its rank 0: the leader
  levels->node_share = group.split(host, group.rank(), group.axis() + " within a host");
  std::unique_ptr<Communicator> cross = group.split(index, group.rank(), group.axis() + " across hosts");
  if (index == 0) levels->cross = std::move(cross);
  levels->size = group.size();
  levels->piece_bytes = piece_bytes;
  return levels;
}

void hierarchical_all_reduce(const std::shared_ptr<HostLevels>& levels, at::Tensor& t, ReduceOp op) {
  hierarchical_all_reduce_async(levels, t, op)->wait();
}

WorkPtr hierarchical_all_reduce_async(const std::shared_ptr<HostLevels>& levels, at::Tensor& t, ReduceOp op) {
  return std::make_unique<LevelsWork>(levels, t, op);
}

}  // namespace loom::dist

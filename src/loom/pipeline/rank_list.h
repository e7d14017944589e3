#pragma once
// One rank's lowered list (NOTE [Pipeline schedules are data]) and what the executor reads off it
// once, before its first step: where each compute action's next backward is, which receives wait
// for a later action than the next one, which receives are posted as the compute action before
// them starts (NOTE [Message progress]), and which micro-batch ends each chunk's backward.
#include <cstdint>
#include <map>
#include <vector>

#include "loom/schedule/schedule.h"

namespace loom::pipeline {

struct RankList {
  std::vector<schedule::Action> actions;             // this rank's lowered list
  std::vector<int64_t> next_backward;                // per action: the next compute action if it is a B or BW, else -1
  std::vector<bool> posted_ahead;                    // per action: a receive posted before an action that is not its own
  std::vector<std::vector<size_t>> early_receives;   // per compute action: receives from other ranks posted as it starts
  std::map<int64_t, int64_t> last_backward;          // chunk -> the micro-batch whose W (or BW) ends it
};

// `virtual_stages[c]`: the virtual stage of this rank's chunk c.
RankList read_rank_list(const schedule::Schedule& schedule, int rank, const std::vector<int64_t>& virtual_stages);

// The virtual stage a receive's message comes from.
int64_t sender_of(const schedule::Action& receive, const std::vector<int64_t>& virtual_stages);

}  // namespace loom::pipeline

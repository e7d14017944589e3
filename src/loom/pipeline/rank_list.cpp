#include "loom/pipeline/rank_list.h"

#include <optional>

namespace loom::pipeline {
namespace {

bool is_receive(const schedule::Action& a) { return a.op == schedule::Op::RecvF || a.op == schedule::Op::RecvB; }

// The first compute action after `i`, or the list's end.
size_t next_compute(const std::vector<schedule::Action>& actions, size_t i) {
  size_t j = i + 1;
  while (j < actions.size() && actions[j].is_message()) ++j;
  return j;
}

}  // namespace

int64_t sender_of(const schedule::Action& receive, const std::vector<int64_t>& virtual_stages) {
  return virtual_stages[receive.chunk] + (receive.op == schedule::Op::RecvB ? 1 : -1);
}

RankList read_rank_list(const schedule::Schedule& schedule, int rank, const std::vector<int64_t>& virtual_stages) {
  RankList list;
  list.actions = schedule::lower(schedule)[rank];
  const std::vector<schedule::Action>& actions = list.actions;
  const size_t n = actions.size();
  list.next_backward.assign(n, -1);
  list.posted_ahead.assign(n, false);
  list.early_receives.assign(n, {});
  std::optional<size_t> last_compute;
  for (size_t i = 0; i < n; ++i) {
    const schedule::Action& a = actions[i];
    const size_t j = next_compute(actions, i);
    if (j < n && (actions[j].op == schedule::Op::B || actions[j].op == schedule::Op::BW))
      list.next_backward[i] = static_cast<int64_t>(j);
    if (!a.is_message()) last_compute = i;
    if (!is_receive(a)) continue;
    // Waited for at its own action, which is not the next compute one: posted ahead.
    list.posted_ahead[i] = j == n || actions[j].mb != a.mb || actions[j].chunk != a.chunk;
    // From another rank: posted as the compute action before it starts (NOTE [Message progress]).
    if (last_compute && schedule.rank_of(sender_of(a, virtual_stages)) != rank)
      list.early_receives[*last_compute].push_back(i);
  }
  for (const schedule::Action& a : schedule.ranks[rank])
    if (a.op == schedule::Op::W || a.op == schedule::Op::BW) list.last_backward[a.chunk] = a.mb;
  return list;
}

}  // namespace loom::pipeline

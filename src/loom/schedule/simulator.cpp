#include "loom/schedule/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "loom/core/error.h"

namespace loom::schedule {
namespace {

// Where each compute action sits: (op, mb, virtual stage) -> (rank, index).
using Key = std::tuple<Op, int64_t, int64_t>;
struct Slot {
  int64_t rank, index;
};

// Slots by key in one flat array: a schedule of hundreds of stages and micro-batches is replayed
// per candidate layout by a planner, where a tree's lookups were most of the time.
class SlotIndex {
 public:
  explicit SlotIndex(const Schedule& s)
      : microbatches_(s.microbatches), stages_(s.virtual_stages()),
        slots_(static_cast<size_t>(kComputeOps * s.microbatches * s.virtual_stages()), Slot{-1, -1}) {}
  const Slot* find(const Key& k) const {
    const Slot& slot = slots_[offset(k)];
    return slot.rank < 0 ? nullptr : &slot;
  }
  bool emplace(const Key& k, Slot value) {  // false when the key holds a slot already
    Slot& slot = slots_[offset(k)];
    if (slot.rank >= 0) return false;
    slot = value;
    return true;
  }

 private:
  static constexpr int64_t kComputeOps = 5;  // F, B, W, BW, R: the ops before the messages
  size_t offset(const Key& k) const {
    const auto [op, mb, stage] = k;
    return static_cast<size_t>((static_cast<int64_t>(op) * microbatches_ + mb) * stages_ + stage);
  }
  int64_t microbatches_, stages_;
  std::vector<Slot> slots_;
};

std::string describe(const Schedule& s, const Action& a, int64_t rank) {
  return fmt::format("{} on rank {}", a.text(s.chunks > 1), rank);
}

// NOTE [Overlapped pairs]: rank r's action i, marked paired, is an F followed by a backward of
// another micro-batch (one of the same micro-batch waits, through the chain, for this F).
void check_pair(const Schedule& s, int64_t r, int64_t i) {
  const auto& list = s.ranks[r];
  const Action& f = list[i];
  const bool next = i + 1 < static_cast<int64_t>(list.size());
  const Action* b = next ? &list[i + 1] : nullptr;
  LOOM_CHECK_INPUT(f.op == Op::F && b && (b->op == Op::B || b->op == Op::BW) && b->mb != f.mb,
                   "schedule {}: {} is overlapped with {}; an overlapped pair is a forward and then the backward (B or "
                   "BW) of another micro-batch, e.g. 0F3&1BW1",
                   s.kind, describe(s, f, r), b ? b->text(s.chunks > 1) : "nothing");
}

// Where each compute action sits, refusing messages, out-of-range actions and duplicates.
SlotIndex index_actions(const Schedule& s) {
  LOOM_CHECK_INPUT(static_cast<int64_t>(s.ranks.size()) == s.stages, "schedule {}: {} rank lists for {} stages",
                   s.kind, s.ranks.size(), s.stages);
  SlotIndex where(s);
  for (int64_t r = 0; r < s.stages; ++r) {
    const auto& list = s.ranks[r];
    for (int64_t i = 0; i < static_cast<int64_t>(list.size()); ++i) {
      const Action& a = list[i];
      LOOM_CHECK_INPUT(!a.is_message(), "schedule {}: {} is a message; schedules list compute actions only", s.kind,
                       describe(s, a, r));
      LOOM_CHECK_INPUT(a.mb < s.microbatches && a.chunk < s.chunks,
                       "schedule {}: {} is out of range ({} micro-batches, {} chunks)", s.kind, describe(s, a, r),
                       s.microbatches, s.chunks);
      const Key key{a.op, a.mb, s.virtual_stage(r, a.chunk)};
      LOOM_CHECK_INPUT(where.emplace(key, Slot{r, i}), "schedule {}: {} appears twice", s.kind,
                       describe(s, a, r));
      if (a.paired) check_pair(s, r, i);
    }
  }
  return where;
}

// Every rank holds, for each micro-batch and each of its chunks, one F and one BW or one B and one
// W, at most one R, in the order F, R, B, W; everything in range.
SlotIndex check_complete(const Schedule& s) {
  SlotIndex where = index_actions(s);
  for (int64_t r = 0; r < s.stages; ++r) {
    for (int64_t c = 0; c < s.chunks; ++c) {
      const int64_t v = s.virtual_stage(r, c);
      for (int64_t mb = 0; mb < s.microbatches; ++mb) {
        auto find = [&](Op op) {
          const Slot* slot = where.find({op, mb, v});
          return slot == nullptr ? int64_t{-1} : slot->index;
        };
        const Action f{Op::F, mb, c};
        const int64_t fi = find(Op::F), ri = find(Op::R), bi = find(Op::B), wi = find(Op::W), bwi = find(Op::BW);
        LOOM_CHECK_INPUT(fi >= 0, "schedule {}: {} is missing", s.kind, describe(s, f, r));
        const bool split = bi >= 0 || wi >= 0;
        LOOM_CHECK_INPUT(split != (bwi >= 0) && (!split || (bi >= 0 && wi >= 0)),
                         "schedule {}: micro-batch {} of virtual stage {} (rank {}) needs one BW or one B and one W",
                         s.kind, mb, v, r);
        const int64_t backward = split ? bi : bwi;
        LOOM_CHECK_INPUT(fi < backward && (ri < 0 || (fi < ri && ri < backward)) && (!split || bi < wi),
                         "schedule {}: rank {} runs micro-batch {}'s actions out of order (F, then R, B, W)", s.kind, r,
                         mb);
      }
    }
  }
  return where;
}

// Critical-path bookkeeping: what an action waited for last.
struct Timed {
  double start = 0, end = 0;
  Slot cause{-1, -1};
};

// The replay of a complete schedule: each rank's next action and the times of those that ran.
class Replay {
 public:
  Replay(const Schedule& s, const Costs& costs) : s_(s), costs_(costs), where_(check_complete(s)), next_(s.stages, 0) {
    times_.resize(s.stages);
    for (int64_t r = 0; r < s.stages; ++r) times_[r].resize(s.ranks[r].size());
  }

  // Runs every rank as far as its dependencies allow, until no rank can go on.
  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int64_t r = 0; r < s_.stages; ++r) {
        while (!finished(r)) {
          const std::optional<Timed> t = ready(r);
          if (!t) break;
          times_[r][next_[r]++] = *t;
          progress = true;
        }
      }
    }
  }

  Simulation timeline() const;
  void check_finished(const Simulation& sim) const;
  std::vector<TimedAction> critical_path() const;

 private:
  bool finished(int64_t r) const { return next_[r] == static_cast<int64_t>(s_.ranks[r].size()); }
  std::optional<Timed> ready(int64_t r) const;
  std::vector<Slot> deps(int64_t r, const Action& a) const;
  // NOTE [Overlapped pairs]: a pair computed together (overlap < 1) waits for both inputs and
  // hands both outputs on at its end; at overlap 1 its actions run one after the other.
  bool together(const Action& a) const { return a.paired && costs_.overlap < 1; }
  // What rank r's action i waits for: its dependencies, and its partner's when they run together.
  std::vector<Slot> waits(int64_t r, int64_t i) const;
  // The action whose end is d's output: d, or its partner when they run together.
  Slot output_of(Slot d) const { return together(s_.ranks[d.rank][d.index]) ? Slot{d.rank, d.index + 1} : d; }
  double duration(int64_t r, int64_t i) const;  // rank r's action i

  const Schedule& s_;
  const Costs& costs_;
  const SlotIndex where_;
  std::vector<std::vector<Timed>> times_;  // per rank, per action; those before next_ have run
  std::vector<int64_t> next_;              // per rank: the first action not run yet
};

// The dependencies of rank r's action a (not counting the previous action on the rank).
std::vector<Slot> Replay::deps(int64_t r, const Action& a) const {
  std::vector<Slot> d;
  const int64_t v = s_.virtual_stage(r, a.chunk), last = s_.virtual_stages() - 1;
  auto add = [&](Op op, int64_t stage) {
    if (const Slot* slot = where_.find({op, a.mb, stage})) d.push_back(*slot);
  };
  switch (a.op) {
    case Op::F:
      if (v > 0) add(Op::F, v - 1);
      break;
    case Op::R:
      add(Op::F, v);
      break;
    case Op::B:
    case Op::BW:
      add(Op::F, v);
      add(Op::R, v);
      if (v < last) add(Op::B, v + 1), add(Op::BW, v + 1);
      break;
    case Op::W:
      add(Op::B, v);
      break;
    default:
      break;
  }
  return d;
}

std::vector<Slot> Replay::waits(int64_t r, int64_t i) const {
  const auto& list = s_.ranks[r];
  std::vector<Slot> d = deps(r, list[i]);
  if (together(list[i])) {
    const std::vector<Slot> partner = deps(r, list[i + 1]);
    d.insert(d.end(), partner.begin(), partner.end());
  }
  return d;
}

double Replay::duration(int64_t r, int64_t i) const {
  const auto& list = s_.ranks[r];
  const Action& a = list[i];
  const int64_t v = s_.virtual_stage(r, a.chunk);
  const StageCosts c = costs_.at(v);
  const double recompute = where_.find({Op::R, a.mb, v}) != nullptr ? 0.0 : c.r;  // not recomputed ahead: B pays it
  double alone = 0.0;
  switch (a.op) {
    case Op::F: alone = c.f; break;
    case Op::R: alone = c.r; break;
    case Op::B: alone = c.b + recompute; break;
    case Op::W: alone = c.w; break;
    case Op::BW: alone = (c.bw > 0 ? c.bw : c.b + c.w) + recompute; break;
    default: break;
  }
  const bool in_pair = a.paired || (i > 0 && list[i - 1].paired);
  return in_pair ? costs_.overlap * alone : alone;
}

// Rank r's next action, timed, if it can start now: after the rank's previous action and the end of
// each dependency (plus p2p from another rank; a pair's when it opens one); none while a
// dependency has not run.
std::optional<Timed> Replay::ready(int64_t r) const {
  Timed t;
  if (next_[r] > 0) t.start = times_[r][next_[r] - 1].end, t.cause = {r, next_[r] - 1};
  for (const Slot& dep : waits(r, next_[r])) {
    const Slot d = output_of(dep);
    if (d.index >= next_[d.rank]) return std::nullopt;
    const double at = times_[d.rank][d.index].end + (d.rank != r ? costs_.p2p : 0.0);
    if (at >= t.start) t.start = at, t.cause = d;
  }
  t.end = t.start + duration(r, next_[r]);
  return t;
}

// What did run, with its times, the makespan and the bubble fraction.
Simulation Replay::timeline() const {
  const int64_t p = s_.stages;
  Simulation sim;
  sim.ranks.resize(p);
  double busy = 0;
  for (int64_t r = 0; r < p; ++r) {
    for (int64_t i = 0; i < next_[r]; ++i) {
      sim.ranks[r].push_back({s_.ranks[r][i], r, times_[r][i].start, times_[r][i].end});
      sim.makespan = std::max(sim.makespan, times_[r][i].end);
      busy += times_[r][i].end - times_[r][i].start;
    }
  }
  sim.bubble_fraction = sim.makespan > 0 ? 1.0 - busy / (static_cast<double>(p) * sim.makespan) : 0.0;
  return sim;
}

// Deadlock: names what every stuck rank waits for, under the grid of what did run.
void Replay::check_finished(const Simulation& sim) const {
  std::string stuck;
  for (int64_t q = 0; q < s_.stages; ++q) {
    if (finished(q)) continue;
    const Action& a = s_.ranks[q][next_[q]];
    std::string on;
    for (const Slot& dep : waits(q, next_[q]))
      if (const Slot d = output_of(dep); d.index >= next_[d.rank])
        on += (on.empty() ? "" : ", ") + describe(s_, s_.ranks[d.rank][d.index], d.rank);
    stuck += fmt::format("\n  >> rank {} step {}: {} waits for {}", q, next_[q], a.text(s_.chunks > 1), on);
  }
  if (!stuck.empty())
    throw InputError(fmt::format("schedule {} deadlocks: no rank can go on after time {}{}\n{}", s_.kind, sim.makespan,
                                 stuck, format_grid(s_, sim)));
}

// Back from the action that ends last, through what each waited for.
std::vector<TimedAction> Replay::critical_path() const {
  std::vector<TimedAction> path;
  Slot at{-1, -1};
  for (int64_t r = 0; r < s_.stages; ++r)
    if (!times_[r].empty() && (at.rank < 0 || times_[r].back().end > times_[at.rank][at.index].end))
      at = {r, static_cast<int64_t>(times_[r].size()) - 1};
  while (at.rank >= 0) {
    const Timed& t = times_[at.rank][at.index];
    path.push_back({s_.ranks[at.rank][at.index], at.rank, t.start, t.end});
    at = t.cause;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

// Stashed micro-batches: from the start of F to the end of W or BW; the most at once, per rank.
std::vector<int64_t> peak_stashed(const Simulation& sim) {
  std::vector<int64_t> peak(sim.ranks.size(), 0);
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    std::vector<std::pair<double, int>> events;  // (time, +1 / -1); ends sort before starts
    for (const TimedAction& t : sim.ranks[r]) {
      if (t.action.op == Op::F) events.emplace_back(t.start, +1);
      if (t.action.op == Op::W || t.action.op == Op::BW) events.emplace_back(t.end, -1);
    }
    std::sort(events.begin(), events.end());
    int64_t live = 0;
    for (auto [time, delta] : events) {
      live += delta;
      LOOM_CHECK(live >= 0, "rank {} releases more micro-batches than it stashed", r);
      peak[r] = std::max(peak[r], live);
    }
    LOOM_CHECK(live == 0, "rank {} ends with {} stashed micro-batches", r, live);
  }
  return peak;
}

}  // namespace

StageCosts Costs::at(int64_t virtual_stage) const {
  if (stages.empty()) return {};
  LOOM_CHECK(virtual_stage < static_cast<int64_t>(stages.size()), "costs for {} stages, asked for stage {}",
             stages.size(), virtual_stage);
  return stages[virtual_stage];
}

Simulation simulate(const Schedule& s, const Costs& costs) {
  LOOM_CHECK_INPUT(costs.overlap > 0 && costs.overlap <= 1,
                   "an overlapped pair's time is overlap x (its F + its backward), overlap in (0, 1], not {}",
                   costs.overlap);
  Replay replay(s, costs);  // refuses an incomplete or out-of-order schedule
  replay.run();
  Simulation sim = replay.timeline();
  replay.check_finished(sim);
  sim.peak_stashed = peak_stashed(sim);
  sim.critical_path = replay.critical_path();
  return sim;
}

std::string format_grid(const Schedule& s, const Simulation& sim) {
  const int64_t p = s.stages;
  size_t width = 4;
  for (const auto& list : sim.ranks)
    for (const TimedAction& t : list) width = std::max(width, t.action.text(s.chunks > 1).size() + (t.action.paired ? 2 : 1));
  const auto rows = static_cast<int64_t>(std::ceil(std::min(sim.makespan, 1e9) - 1e-9));
  constexpr int64_t kMaxRows = 2000;
  if (rows > kMaxRows)
    return fmt::format("(grid of {} time units not shown; at most {})\n", rows, kMaxRows);
  std::string out = fmt::format("{:>5} ", "time");
  for (int64_t r = 0; r < p; ++r) out += fmt::format("{:<{}}", fmt::format("r{}", r), width);
  out += '\n';
  for (int64_t row = 0; row < rows; ++row) {
    out += fmt::format("{:>5} ", row);
    for (int64_t r = 0; r < p; ++r) {
      std::string cell = ".";
      for (const TimedAction& t : sim.ranks[r]) {
        if (t.end - t.start <= 0 || t.start >= static_cast<double>(row + 1) - 1e-9 || t.end <= static_cast<double>(row) + 1e-9)
          continue;
        // An overlapped pair's F is marked `&` (NOTE [Overlapped pairs]).
        cell = t.start >= static_cast<double>(row) - 1e-9 ? t.action.text(s.chunks > 1) + (t.action.paired ? "&" : "") : "|";
      }
      out += fmt::format("{:<{}}", cell, width);
    }
    out += '\n';
  }
  return out;
}

}  // namespace loom::schedule

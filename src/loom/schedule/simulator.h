#pragma once
// The schedule validator and unit simulator (NOTE [Pipeline schedules are data]): no MPI, no
// layers. It checks that every rank's list holds exactly the actions of its virtual stages, then
// replays the lists: an action starts when its rank is free and its dependencies have ended
//   F(mb, v)  after F(mb, v-1)                 R(mb, v)  after F(mb, v)
//   B(mb, v)  after F(mb, v), R(mb, v) if any, and B or BW(mb, v+1)
//   W(mb, v)  after B(mb, v)                   BW        as B
// (plus `p2p` for a message between ranks); an overlapped pair computed together starts once both
// its actions could, and its outputs leave when it ends (NOTE [Overlapped pairs]). A rank whose next action can never start is a
// deadlock. Reports the bubble fraction, the critical path and each rank's peak number of stashed
// micro-batches (from the start of F to the end of W or BW).
#include <vector>

#include "loom/schedule/schedule.h"

namespace loom::schedule {

// Durations on one virtual stage. `r` > 0 means the stage recomputes its forward before the
// backward: an explicit R action takes r; a B or BW with no R before it pays r itself. A BW takes
// `bw` where given (> 0; measured, a whole backward is not always B + W), else b + w.
struct StageCosts {
  double f = 1, b = 1, w = 1, r = 0, bw = 0;
};

struct Costs {
  std::vector<StageCosts> stages;  // per virtual stage; empty = unit costs everywhere
  double p2p = 0;                  // added to a dependency that crosses ranks
  // An overlapped pair takes overlap x (its F + its backward) (NOTE [Overlapped pairs]): 1 where
  // the two run one after the other, as loom's executor runs them; below 1, computed together.
  double overlap = 1;
  StageCosts at(int64_t virtual_stage) const;
};

struct TimedAction {
  Action action;
  int64_t rank = 0;
  double start = 0, end = 0;
};

struct Simulation {
  double makespan = 0;
  double bubble_fraction = 0;                    // 1 - busy time / (ranks x makespan)
  std::vector<std::vector<TimedAction>> ranks;   // the replayed lists with their times
  std::vector<int64_t> peak_stashed;             // per rank
  std::vector<TimedAction> critical_path;        // first to last; its length is the makespan
};

// Throws InputError (first line: what is wrong; then the grid with the failing step marked) for
// an incomplete, out-of-order or deadlocking schedule.
Simulation simulate(const Schedule& schedule, const Costs& costs = {});

// The timeline as a grid: one row per time unit, one column per rank; an action spans as many rows
// as it lasts (the first row names it, the others show "|"; "." is idle; a pair's F ends in "&").
std::string format_grid(const Schedule& schedule, const Simulation& sim);

}  // namespace loom::schedule

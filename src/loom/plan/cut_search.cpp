// The stage cuts of parallel.partition (NOTE [Memory cost model]): balanced by the layers' times,
// by each rank's kept peak, and the fastest cut whose stages fit with their best policies.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "loom/schedule/stage_cuts.h"
#include "loom/plan/memory_model.h"
#include "loom/schedule/simulator.h"

namespace loom::plan {

namespace {

// A slice [j, i) as pipeline rank k, for the cut search: the stash-times-bytes form of the replay
// (micro-batches held at once from the schedule's unit replay, the copy's window from the slice's
// own action times), each layer kept, swapped (about two micro-batches' state stays: one leaving,
// one coming back) or recomputed (its input stays; its state returns as a temporary), chosen by
// the same least-time-per-byte rule. auto_cuts checks the cut it finds with the replay.
struct SliceCheck {
  double time = 0;  // per micro-batch, the policy's extra included
  bool fits = true;
};

struct SliceLayer {
  double held_keep, held_swap, held_recompute;  // bytes the layer holds under each choice
  double extra_swap, extra_recompute;           // seconds each adds per micro-batch
  double temporary_recompute;                   // its rebuilt state and temporaries
  double workspace, saved, input;               // one micro-batch's (NOTE [Backward moments])
};

// Whether any rank's backward is split into B and W (NOTE [Backward moments]: nothing is freed
// before the W).
bool splits_backward(const schedule::Schedule& s) {
  for (const auto& rank : s.ranks)
    for (const schedule::Action& a : rank)
      if (a.op == schedule::Op::B) return true;
  return false;
}

SliceCheck check_slice(const MemoryModel& m, int64_t stashed, int64_t j, int64_t i, double budget) {
  const auto held = static_cast<double>(stashed);
  const bool split = splits_backward(m.schedule);
  FixedBytes fixed;
  double step = 0;
  for (int64_t l = j; l < i; ++l) {
    fixed.add(m.layers[l]);
    step += m.layers[l].forward_s + m.layers[l].backward_input_s + m.layers[l].backward_weight_s;
  }
  const double window = (held - 1) * step;  // actions between a micro-batch's forward and backward
  std::vector<SliceLayer> layers;
  for (int64_t l = j; l < i; ++l) {
    const LayerCosts& c = m.layers[l];
    layers.push_back({c.saved_bytes * held, c.saved_bytes * std::min(held, 2.0), c.input_bytes * held,
                      std::max(0.0, 2 * c.saved_bytes / m.copy_bytes_per_s - window), c.forward_s,
                      recompute_moment(c), c.workspace_bytes, c.saved_bytes, c.input_bytes});
  }
  std::vector<int> choice(layers.size(), 0);  // 0 keep, 1 swap, 2 recompute
  // The replay's backward moments: last layer first, each beside what the later ones left.
  auto need = [&] {
    double bytes = fixed.total(), temporary = 0, freed = 0;
    for (size_t l = layers.size(); l-- > 0;) {
      const SliceLayer& s = layers[l];
      bytes += choice[l] == 0 ? s.held_keep : choice[l] == 1 ? s.held_swap : s.held_recompute;
      temporary = std::max(temporary, (choice[l] == 2 ? s.temporary_recompute : s.workspace) - (split ? 0 : freed));
      freed += choice[l] == 2 ? s.input : s.saved;
    }
    return bytes + temporary;
  };
  double extra = 0;
  for (double now = need(); now > budget;) {  // the move with the least time per byte, each layer once more
    double best_score = std::numeric_limits<double>::infinity();
    size_t best_layer = 0;
    int best_to = 0;
    for (size_t l = 0; l < layers.size(); ++l)
      for (int to = choice[l] + 1; to <= 2; ++to) {
        const int was = std::exchange(choice[l], to);
        const double freed = now - need();
        choice[l] = was;
        const double cost = (to == 1 ? layers[l].extra_swap : layers[l].extra_recompute) -
                            (was == 1 ? layers[l].extra_swap : 0);
        if (freed > 0 && std::max(0.0, cost) / freed < best_score)
          best_score = std::max(0.0, cost) / freed, best_layer = l, best_to = to;
      }
    if (best_score == std::numeric_limits<double>::infinity()) return {step + extra, false};
    extra += (best_to == 1 ? layers[best_layer].extra_swap : layers[best_layer].extra_recompute) -
             (choice[best_layer] == 1 ? layers[best_layer].extra_swap : 0);
    choice[best_layer] = best_to;
    now = need();
  }
  return {step + extra, true};
}

double time_of(const LayerCosts& c) { return c.forward_s + c.backward_input_s + c.backward_weight_s; }

}  // namespace

std::vector<int64_t> compute_cuts(const MemoryModel& m) {
  std::vector<double> times;
  for (const LayerCosts& c : m.layers) times.push_back(time_of(c));
  return schedule::balanced_cuts(times, m.schedule.virtual_stages());
}

std::vector<int64_t> memory_cuts(const MemoryModel& m) {
  const std::vector<int64_t> held = schedule::simulate(m.schedule).peak_stashed;
  return schedule::balanced_cuts(static_cast<int64_t>(m.layers.size()), m.schedule.stages,
                                 [&](int64_t k, int64_t j, int64_t i) {
                                   FixedBytes fixed;
                                   double bytes = 0, transient = 0;
                                   for (int64_t l = j; l < i; ++l) {
                                     const LayerCosts& c = m.layers[l];
                                     fixed.add(c);
                                     bytes += static_cast<double>(held[k]) * c.saved_bytes;
                                     transient = std::max(transient, c.workspace_bytes);
                                   }
                                   return fixed.total() + bytes + transient;
                                 });
}

namespace {

// Bytes the ranks need beyond the budget under their best policies (0 when the cut fits).
double shortfall(const MemoryModel& m, const std::vector<int64_t>& cuts) {
  const PolicyChoice choice = choose_policies(m, cuts);
  return choice.fits ? 0.0 : std::max(total_over_budget(m, cuts, choice.prediction), 1.0);
}

// Where the slice form misjudges: from `cuts`, move boundaries by one layer at a time while that
// lowers the shortfall the replay finds, until the cut fits or no move helps. Returns the cut
// and its shortfall.
std::pair<std::vector<int64_t>, double> fitting_neighbour(const MemoryModel& m, std::vector<int64_t> cuts) {
  double now = shortfall(m, cuts);
  while (now > 0) {
    std::vector<int64_t> best;
    double best_short = now;
    // A run of neighbouring boundaries moved together: one layer passed along several stages.
    for (size_t first = 1; first + 1 < cuts.size(); ++first)
      for (size_t last = first; last + 1 < cuts.size(); ++last)
        for (int64_t step : {-1, 1}) {
          std::vector<int64_t> trial = cuts;
          for (size_t b = first; b <= last; ++b) trial[b] += step;
          if (trial[first] <= trial[first - 1] || trial[last] >= trial[last + 1]) continue;
          const double s = shortfall(m, trial);
          if (s < best_short) best_short = s, best = std::move(trial);
        }
    if (best.empty()) break;
    cuts = std::move(best), now = best_short;
  }
  return {std::move(cuts), now};
}

}  // namespace

std::vector<int64_t> auto_cuts(const MemoryModel& m) {
  const std::vector<int64_t> held = schedule::simulate(m.schedule).peak_stashed;
  const auto n = static_cast<int64_t>(m.layers.size());
  const int64_t stages = m.schedule.stages;
  // Bytes the slice form under-counts at each rank, learnt from the replay of the cuts it chose.
  std::vector<double> slack(static_cast<size_t>(stages), 0.0);
  std::vector<std::vector<int64_t>> starts{memory_cuts(m), compute_cuts(m)};
  for (int round = 0; round < 8; ++round) {
    std::map<std::tuple<int64_t, int64_t, int64_t>, SliceCheck> seen;
    // Cuts whose slices all fit, minimising the slowest slice: the binary search over the
    // bottleneck time, done exactly by the min-max recursion over the slices that fit.
    const std::vector<int64_t> cuts = schedule::balanced_cuts(n, stages, [&](int64_t k, int64_t j, int64_t i) {
      auto [it, fresh] = seen.try_emplace({k, j, i});
      if (fresh) it->second = check_slice(m, held[k], j, i, m.budget - slack[k]);
      return it->second.fits ? it->second.time : std::numeric_limits<double>::infinity();
    });
    if (cuts.empty()) break;
    if (round == 0) starts.push_back(cuts);
    const PolicyChoice choice = choose_policies(m, cuts);
    if (choice.fits) return cuts;
    const std::vector<double> over = bytes_over_budget(m, cuts, choice.prediction);
    for (int64_t k = 0; k < stages; ++k)
      if (over[k] > 0) slack[k] += std::max(over[k], 0.01 * m.budget);
  }
  // The slice form misjudged: search near the memory-balanced, compute-balanced and first cuts.
  std::vector<int64_t> best;
  double least = std::numeric_limits<double>::infinity();
  for (const std::vector<int64_t>& start : starts) {
    auto [cuts, s] = fitting_neighbour(m, start);
    if (s == 0) return cuts;
    if (s < least) least = s, best = std::move(cuts);
  }
  return best;
}

}  // namespace loom::plan

// The search for each layer's keep / recompute / swap under a memory budget: a greedy by added
// time per byte freed, then a polish where it gets stuck. Declared in memory_model.h, whose
// predict() prices every candidate.
#include "loom/plan/memory_model.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace loom::plan {

using nn::MemoryPolicy;

namespace {

double fixed_of(const MemoryModel& m, const std::vector<int64_t>& cuts, int64_t rank) {
  FixedBytes fixed;
  for (int64_t c = 0; c < m.schedule.chunks; ++c) {
    const int64_t v = m.schedule.virtual_stage(rank, c);
    for (int64_t i = cuts[v]; i < cuts[v + 1]; ++i) fixed.add(m.layers[i]);
  }
  return fixed.total();
}

int64_t rank_of_layer(const MemoryModel& m, const std::vector<int64_t>& cuts, int64_t layer) {
  const auto v = std::upper_bound(cuts.begin(), cuts.end(), layer) - cuts.begin() - 1;
  return m.schedule.rank_of(v);  // a V's chunk 1 runs on rank 2p - 1 - v (NOTE [V-shaped pipelines])
}

}  // namespace

std::vector<double> bytes_over_budget(const MemoryModel& m, const std::vector<int64_t>& cuts, const Prediction& p) {
  std::vector<double> out;
  for (int64_t r = 0; r < m.schedule.stages; ++r)
    out.push_back(fixed_of(m, cuts, r) + p.stages[r].total() - m.budget);
  return out;
}

double total_over_budget(const MemoryModel& m, const std::vector<int64_t>& cuts, const Prediction& p) {
  double bytes = 0;
  for (double over : bytes_over_budget(m, cuts, p)) bytes += std::max(over, 0.0);
  return bytes;
}

namespace {

// The policies one step of the greedy may try: each layer of a rank that does not fit, moved to
// swap or recompute alone, and (for peaks that single moves cannot lower, where the held
// micro-batches all reach their backward) every such layer of the rank moved at once.
std::vector<std::vector<MemoryPolicy>> candidates(const MemoryModel& m, const std::vector<int64_t>& cuts,
                                                  const std::vector<MemoryPolicy>& policy,
                                                  const std::vector<double>& over) {
  std::vector<std::vector<MemoryPolicy>> out;
  for (MemoryPolicy to : {MemoryPolicy::Swap, MemoryPolicy::Recompute}) {
    std::vector<std::vector<MemoryPolicy>> whole(over.size(), policy);
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const int64_t r = rank_of_layer(m, cuts, static_cast<int64_t>(i));
      if (over[r] <= 0 || policy[i] == MemoryPolicy::Recompute || policy[i] == to) continue;
      out.push_back(policy);
      out.back()[i] = to;
      whole[r][i] = to;
    }
    for (size_t r = 0; r < over.size(); ++r)
      if (over[r] > 0 && whole[r] != policy) out.push_back(std::move(whole[r]));
  }
  return out;
}

// Pairs of layers are tried on chains this long at most (a stage has a few to a few tens).
constexpr size_t kPolishPairsUpTo = 64;

// Where the greedy got stuck over budget: one layer to any other policy, or two layers of a rank
// both changed, kept while it lowers what the ranks need beyond the budget (a change taken early may
// stand in the way of a fitting policy, or of the least need the refusal names).
void polish(const MemoryModel& m, const std::vector<int64_t>& cuts, PolicyChoice& choice) {
  double now = total_over_budget(m, cuts, choice.prediction);
  auto try_policy = [&](std::vector<MemoryPolicy> trial) {
    Prediction p = predict(m, cuts, trial);
    const double after = total_over_budget(m, cuts, p);
    if (after >= now) return false;
    choice.policy = std::move(trial), choice.prediction = std::move(p), now = after;
    return true;
  };
  for (bool better = true; better && now > 0;) {
    better = false;
    const size_t n = m.layers.size();
    for (size_t i = 0; i < n; ++i)
      for (MemoryPolicy to : {MemoryPolicy::Keep, MemoryPolicy::Swap, MemoryPolicy::Recompute}) {
        if (to == choice.policy[i]) continue;
        std::vector<MemoryPolicy> trial = choice.policy;
        trial[i] = to;
        better |= try_policy(std::move(trial));
      }
    if (better || n > kPolishPairsUpTo) continue;
    for (size_t i = 0; i < n; ++i)  // two layers of a rank changed at once
      for (size_t j = i + 1; j < n; ++j) {
        if (rank_of_layer(m, cuts, static_cast<int64_t>(i)) != rank_of_layer(m, cuts, static_cast<int64_t>(j)))
          continue;
        for (MemoryPolicy a : {MemoryPolicy::Keep, MemoryPolicy::Swap, MemoryPolicy::Recompute})
          for (MemoryPolicy b : {MemoryPolicy::Keep, MemoryPolicy::Swap, MemoryPolicy::Recompute}) {
            if (a == choice.policy[i] || b == choice.policy[j]) continue;
            std::vector<MemoryPolicy> trial = choice.policy;
            trial[i] = a, trial[j] = b;
            better |= try_policy(std::move(trial));
          }
      }
  }
}

// The greedy got stuck over budget: polish its policies, and every layer of the ranks over
// budget recomputed, and swapped; the one that needs least (fitting, perhaps).
PolicyChoice least_over(const MemoryModel& m, const std::vector<int64_t>& cuts, PolicyChoice stuck) {
  const std::vector<double> over = bytes_over_budget(m, cuts, stuck.prediction);
  std::vector<PolicyChoice> starts{std::move(stuck)};
  for (MemoryPolicy to : {MemoryPolicy::Recompute, MemoryPolicy::Swap}) {
    PolicyChoice all{.policy = starts.front().policy};
    for (size_t i = 0; i < m.layers.size(); ++i)
      if (over[rank_of_layer(m, cuts, static_cast<int64_t>(i))] > 0) all.policy[i] = to;
    all.prediction = predict(m, cuts, all.policy);
    starts.push_back(std::move(all));
  }
  for (PolicyChoice& start : starts) {
    polish(m, cuts, start);
    start.fits = total_over_budget(m, cuts, start.prediction) <= 0;
  }
  return *std::min_element(starts.begin(), starts.end(), [&](const PolicyChoice& a, const PolicyChoice& b) {
    const double ea = total_over_budget(m, cuts, a.prediction), eb = total_over_budget(m, cuts, b.prediction);
    return ea != eb ? ea < eb : a.prediction.step_s < b.prediction.step_s;
  });
}

}  // namespace

PolicyChoice choose_policies(const MemoryModel& m, const std::vector<int64_t>& cuts) {
  PolicyChoice out{.policy = std::vector<MemoryPolicy>(m.layers.size(), MemoryPolicy::Keep)};
  out.prediction = predict(m, cuts, out.policy);
  if (m.budget <= 0) return out;
  for (;;) {
    const std::vector<double> over = bytes_over_budget(m, cuts, out.prediction);
    if (std::all_of(over.begin(), over.end(), [](double b) { return b <= 0; })) return out;
    // The change with the least added time per byte freed on the ranks that do not fit.
    double best_score = std::numeric_limits<double>::infinity(), best_freed = 0;
    std::vector<MemoryPolicy> best;
    Prediction best_prediction;
    for (std::vector<MemoryPolicy>& trial : candidates(m, cuts, out.policy, over)) {
      const Prediction p = predict(m, cuts, trial);
      const std::vector<double> after = bytes_over_budget(m, cuts, p);
      double freed = 0;  // bytes the ranks still needed: freeing more than needed earns nothing
      for (size_t r = 0; r < over.size(); ++r)
        if (over[r] > 0) freed += over[r] - std::max(after[r], 0.0);
      if (freed <= 0) continue;
      const double score = std::max(0.0, p.step_s - out.prediction.step_s) / freed;
      if (score < best_score || (score == best_score && freed > best_freed))
        best_score = score, best_freed = freed, best = std::move(trial), best_prediction = p;
    }
    if (best.empty()) return least_over(m, cuts, std::move(out));  // nothing frees more
    out.policy = std::move(best);
    out.prediction = std::move(best_prediction);
  }
}

}  // namespace loom::plan

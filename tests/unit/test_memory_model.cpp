// NOTE [Memory cost model], tested on synthetic models (hand-made LayerCosts, generated
// schedules; no model, no MPI): a rank that fits keeps everything; a tight budget recomputes the
// cheapest layers per byte first, and only as many as it needs; swap is chosen where the copy hides
// between a micro-batch's forward and backward, recompute where it cannot; predict()'s peak with
// every layer kept is the schedule's stash times the bytes; the policy fits whenever some policy
// does (every policy tried on small chains); the cut search finds a feasible cut whenever one
// exists (every cut tried); the memory cut balances memory; and balanced_cuts' min-max recursion
// with impossible slices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "loom/nn/memory_policy.h"
#include "loom/schedule/stage_cuts.h"
#include "loom/plan/memory_model.h"
#include "loom/schedule/schedule.h"
#include "loom/schedule/simulator.h"

namespace loom::plan {
namespace {

using nn::MemoryPolicy;
constexpr double kMB = 1e6;
constexpr double kMs = 1e-3;

// `n` identical layers: 1 ms forward, 1 ms each backward half, 1 MB saved, a small input.
std::vector<LayerCosts> uniform_layers(int64_t n) {
  return std::vector<LayerCosts>(static_cast<size_t>(n), LayerCosts{.forward_s = kMs,
                                                                     .backward_input_s = kMs,
                                                                     .backward_weight_s = kMs,
                                                                     .saved_bytes = kMB,
                                                                     .input_bytes = 0.05 * kMB});
}

// Every rank's fixed + predicted bytes (fits_budget in run_plan.cpp).
std::vector<double> rank_needs(const MemoryModel& m, const std::vector<int64_t>& cuts, const Prediction& p) {
  std::vector<double> out;
  for (int64_t r = 0; r < m.schedule.stages; ++r) {
    double fixed = 0;
    for (int64_t c = 0; c < m.schedule.chunks; ++c) {
      const int64_t v = m.schedule.virtual_stage(r, c);
      for (int64_t i = cuts[v]; i < cuts[v + 1]; ++i) fixed += m.layers[i].fixed_bytes;
    }
    out.push_back(fixed + p.stages[r].total());
  }
  return out;
}

// Feasible as run_plan's fits_budget decides it: the chosen policies fit and every rank's fixed
// plus predicted bytes is within the budget.
bool feasible(const MemoryModel& m, const std::vector<int64_t>& cuts) {
  const PolicyChoice choice = choose_policies(m, cuts);
  if (!choice.fits) return false;
  if (m.budget <= 0) return true;
  const std::vector<double> need = rank_needs(m, cuts, choice.prediction);
  return std::all_of(need.begin(), need.end(), [&](double b) { return b <= m.budget; });
}

// Every cut of `n` layers into `parts` non-empty slices (parts + 1 boundaries).
std::vector<std::vector<int64_t>> all_cuts(int64_t n, int64_t parts) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> cuts{0};
  std::function<void()> extend = [&] {
    const auto k = static_cast<int64_t>(cuts.size());  // boundaries so far; the next is slice k-1's end
    if (k == parts) {
      cuts.push_back(n);
      out.push_back(cuts);
      cuts.pop_back();
      return;
    }
    for (int64_t c = cuts.back() + 1; c <= n - (parts - k); ++c) {
      cuts.push_back(c);
      extend();
      cuts.pop_back();
    }
  };
  extend();
  return out;
}

std::string text(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "}";
  return os.str();
}

std::string describe(const MemoryModel& m) {
  std::ostringstream os;
  os.precision(17);
  os << "schedule " << m.schedule.kind << " pp=" << m.schedule.stages << " microbatches=" << m.schedule.microbatches
     << " budget=" << m.budget << " copy_bytes_per_s=" << m.copy_bytes_per_s << "\n";
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerCosts& l = m.layers[i];
    os << "  layer " << i << ": f=" << l.forward_s << " bi=" << l.backward_input_s << " bw=" << l.backward_weight_s
       << " saved=" << l.saved_bytes << " input=" << l.input_bytes << " workspace=" << l.workspace_bytes
       << " fixed=" << l.fixed_bytes << "\n";
  }
  return os.str();
}

size_t count(const std::vector<MemoryPolicy>& policy, MemoryPolicy p) {
  return static_cast<size_t>(std::count(policy.begin(), policy.end(), p));
}

TEST(MemoryModel, StageThatFitsKeepsEverything) {
  for (const char* kind : {"gpipe", "1f1b", "zb-h1"}) {
    MemoryModel m{.layers = uniform_layers(8), .schedule = schedule::make_schedule(kind, 4, 8)};
    const std::vector<int64_t> cuts{0, 2, 4, 6, 8};
    for (double budget : {0.0, 1e12}) {  // no budget; a budget far above every rank's need
      m.budget = budget;
      const PolicyChoice choice = choose_policies(m, cuts);
      EXPECT_TRUE(choice.fits) << kind << " budget " << budget;
      EXPECT_EQ(count(choice.policy, MemoryPolicy::Keep), m.layers.size()) << kind << " budget " << budget;
    }
    // A budget exactly at the keep-everything need of the fullest rank still keeps everything.
    m.budget = 0;
    const std::vector<double> need = rank_needs(m, cuts, predict(m, cuts, choose_policies(m, cuts).policy));
    m.budget = *std::max_element(need.begin(), need.end());
    const PolicyChoice choice = choose_policies(m, cuts);
    EXPECT_TRUE(choice.fits) << kind;
    EXPECT_EQ(count(choice.policy, MemoryPolicy::Keep), m.layers.size()) << kind;
  }
}

// One stage, GPipe over 4 micro-batches: every forward, then every backward, so all 4 are held at
// once and recomputing a layer frees 4 x (saved - input) for two saved states of transient (the
// rebuilt layer's state and its backward's gradients of it), less what the layers after it have
// freed by then in the BW (NOTE [Backward moments]). The copy engine is so slow that a swap frees
// nothing: only recompute helps.
MemoryModel single_stage(std::vector<LayerCosts> layers) {
  return {.layers = std::move(layers),
          .schedule = schedule::make_schedule("gpipe", 1, 4),
          .budget = 0,
          .copy_bytes_per_s = 1.0};
}

// single_stage's need with the first k layers of `order` recomputed: 4 x what each layer holds,
// and the busiest recomputed layer's two saved states less what the layers after it freed.
double single_stage_need(const std::vector<LayerCosts>& layers, const std::vector<size_t>& order, int k) {
  std::vector<bool> recomputed(layers.size(), false);
  for (int j = 0; j < k; ++j) recomputed[order[static_cast<size_t>(j)]] = true;
  double held = 0, transient = 0, freed = 0;
  for (size_t i = layers.size(); i-- > 0;) {
    const double holds = recomputed[i] ? layers[i].input_bytes : layers[i].saved_bytes;
    if (recomputed[i]) transient = std::max(transient, 2 * layers[i].saved_bytes - freed);
    held += holds, freed += holds;
  }
  return 4 * held + transient;
}

TEST(MemoryModel, TightBudgetRecomputesCheapestForwardFirst) {
  // Equal saved bytes, forward times 4, 1, 3, 2 ms: layers 1, then 3, then 2, then 0.
  std::vector<LayerCosts> layers = uniform_layers(4);
  const double forward_ms[] = {4, 1, 3, 2};
  for (size_t i = 0; i < layers.size(); ++i) layers[i].forward_s = forward_ms[i] * kMs;
  MemoryModel m = single_stage(layers);
  ASSERT_EQ(schedule::simulate(m.schedule).peak_stashed, std::vector<int64_t>{4});
  const std::vector<int64_t> cuts{0, 4};
  const std::vector<size_t> order{1, 3, 2, 0};
  // k layers recomputed need 4 x ((4 - k) saved + k input) + the rebuilt layer's transient: none
  // for layer 1 alone (layers 3 and 2 freed 2 MB before it rebuilds 2 MB), 2 MB from k = 2 on.
  auto need = [&](int k) { return single_stage_need(layers, order, k); };
  for (int k = 1; k <= 4; ++k) {
    m.budget = (need(k) + need(k - 1)) / 2;  // between the thresholds of k - 1 and k changes
    const PolicyChoice choice = choose_policies(m, cuts);
    EXPECT_TRUE(choice.fits) << "k = " << k;
    EXPECT_EQ(count(choice.policy, MemoryPolicy::Recompute), static_cast<size_t>(k)) << "k = " << k;
    EXPECT_EQ(count(choice.policy, MemoryPolicy::Swap), 0u) << "k = " << k;
    for (int j = 0; j < k; ++j) EXPECT_EQ(choice.policy[order[j]], MemoryPolicy::Recompute) << "k = " << k;
    EXPECT_NEAR(rank_needs(m, cuts, choice.prediction)[0], need(k), 1e-6 * need(k)) << "k = " << k;
  }
  // A byte above a threshold: that many and no more.
  m.budget = need(2) + 1;
  EXPECT_EQ(count(choose_policies(m, cuts).policy, MemoryPolicy::Recompute), 2u);
}

TEST(MemoryModel, TightBudgetRecomputesLargestSavedBytesFirst) {
  // Equal forward times, saved bytes 1, 4, 2, 3 MB: layers 1, then 3, then 2, then 0.
  std::vector<LayerCosts> layers = uniform_layers(4);
  const double saved_mb[] = {1, 4, 2, 3};
  for (size_t i = 0; i < layers.size(); ++i) layers[i].saved_bytes = saved_mb[i] * kMB;
  MemoryModel m = single_stage(layers);
  const std::vector<int64_t> cuts{0, 4};
  const std::vector<size_t> order{1, 3, 2, 0};
  // The first k of `order` recomputed: 4 x (what the others keep + the inputs) + the busiest
  // rebuilt layer's two saved states less what the layers after it freed (3, 6, 7.9, 7.9 MB).
  auto need = [&](int k) { return single_stage_need(layers, order, k); };
  for (int k = 1; k <= 4; ++k) {
    // Between the thresholds: exactly k changes (the last may be any layer that frees enough).
    m.budget = (need(k) + need(k - 1)) / 2;
    PolicyChoice choice = choose_policies(m, cuts);
    EXPECT_TRUE(choice.fits) << "k = " << k;
    EXPECT_EQ(count(choice.policy, MemoryPolicy::Recompute), static_cast<size_t>(k)) << "k = " << k;
    // A byte above the k-th threshold: only the k largest free enough, in that order.
    m.budget = need(k) + 1;
    choice = choose_policies(m, cuts);
    EXPECT_TRUE(choice.fits) << "k = " << k;
    EXPECT_EQ(count(choice.policy, MemoryPolicy::Recompute), static_cast<size_t>(k)) << "k = " << k;
    for (int j = 0; j < k; ++j) EXPECT_EQ(choice.policy[order[j]], MemoryPolicy::Recompute) << "k = " << k;
    EXPECT_NEAR(rank_needs(m, cuts, choice.prediction)[0], need(k), 1e-6 * need(k)) << "k = " << k;
  }
}

TEST(MemoryModel, NothingFitsReportsLeastNeed) {
  MemoryModel m = single_stage(uniform_layers(4));
  m.budget = 1;  // one byte: nothing fits
  const std::vector<int64_t> cuts{0, 4};
  const PolicyChoice choice = choose_policies(m, cuts);
  EXPECT_FALSE(choice.fits);
  // Every layer recomputed: 4 x 4 inputs + two saved states of transient.
  EXPECT_EQ(count(choice.policy, MemoryPolicy::Recompute), 4u);
  EXPECT_NEAR(rank_needs(m, cuts, choice.prediction)[0], 16 * 0.05 * kMB + 2 * kMB, 1.0);
}

// pp = 4 1F1B over 8 micro-batches, two layers per rank: rank 0 holds 4 micro-batches (8 MB),
// rank 1 3, rank 2 2, rank 3 1. A 7 MB budget squeezes rank 0 alone.
MemoryModel four_stages(double copy_bytes_per_s) {
  return {.layers = uniform_layers(8),
          .schedule = schedule::make_schedule("1f1b", 4, 8),
          .budget = 7 * kMB,
          .copy_bytes_per_s = copy_bytes_per_s};
}

TEST(MemoryModel, SwapWhereTheCopyHides) {
  MemoryModel m = four_stages(1e15);  // 1 MB in a nanosecond: the copy always hides
  ASSERT_EQ(schedule::simulate(m.schedule).peak_stashed, (std::vector<int64_t>{4, 3, 2, 1}));
  const std::vector<int64_t> cuts{0, 2, 4, 6, 8};
  const Prediction keep = predict(m, cuts, std::vector<MemoryPolicy>(8, MemoryPolicy::Keep));
  EXPECT_NEAR(keep.stages[0].activation_bytes, 8 * kMB, 1.0);
  const PolicyChoice choice = choose_policies(m, cuts);
  EXPECT_TRUE(choice.fits);
  EXPECT_GE(count(choice.policy, MemoryPolicy::Swap), 1u);
  EXPECT_EQ(count(choice.policy, MemoryPolicy::Recompute), 0u);
  for (size_t i = 2; i < 8; ++i) EXPECT_EQ(choice.policy[i], MemoryPolicy::Keep) << "layer " << i;
  EXPECT_GT(choice.prediction.stages[0].host_bytes, 0);
  EXPECT_LE(rank_needs(m, cuts, choice.prediction)[0], m.budget);
  // A hidden copy costs no time.
  EXPECT_NEAR(choice.prediction.step_s, keep.step_s, 1e-6 * keep.step_s);
}

TEST(MemoryModel, RecomputeWhereTheCopyCannotHide) {
  MemoryModel m = four_stages(1.0);  // 1 MB in 11 days: the state never leaves in time
  const std::vector<int64_t> cuts{0, 2, 4, 6, 8};
  const PolicyChoice choice = choose_policies(m, cuts);
  EXPECT_TRUE(choice.fits);
  EXPECT_EQ(count(choice.policy, MemoryPolicy::Swap), 0u);
  EXPECT_GE(count(choice.policy, MemoryPolicy::Recompute), 1u);
  for (size_t i = 2; i < 8; ++i) EXPECT_EQ(choice.policy[i], MemoryPolicy::Keep) << "layer " << i;
  EXPECT_LE(rank_needs(m, cuts, choice.prediction)[0], m.budget);
}

// Layers whose bytes differ, so that a wrong rank or a wrong stash shows.
std::vector<LayerCosts> varied_layers() {
  std::vector<LayerCosts> layers;
  for (int i = 0; i < 8; ++i)
    layers.push_back({.forward_s = (1 + i % 3) * kMs,
                      .backward_input_s = (1 + i % 2) * kMs,
                      .backward_weight_s = kMs,
                      .saved_bytes = (1 + i) * kMB,
                      .input_bytes = 0.1 * kMB,
                      .workspace_bytes = 0.2 * kMB,
                      .fixed_bytes = 0.5 * kMB});
  return layers;
}

TEST(MemoryModel, PredictedPeakIsTheStashTimesTheBytes) {
  const std::vector<int64_t> cuts{0, 2, 5, 6, 8};
  for (const char* kind : {"gpipe", "1f1b", "zb-h1"}) {
    const MemoryModel m{.layers = varied_layers(), .schedule = schedule::make_schedule(kind, 4, 8)};
    const std::vector<int64_t> stashed = schedule::simulate(m.schedule).peak_stashed;
    const std::vector<MemoryPolicy> keep(8, MemoryPolicy::Keep);
    const Prediction p = predict(m, cuts, keep);
    ASSERT_EQ(p.stages.size(), 4u);
    for (int64_t r = 0; r < 4; ++r) {
      double saved = 0;
      for (int64_t i = cuts[r]; i < cuts[r + 1]; ++i) saved += m.layers[i].saved_bytes;
      EXPECT_NEAR(p.stages[r].activation_bytes, saved * static_cast<double>(stashed[r]), 1e-6)
          << kind << " rank " << r;
      EXPECT_NEAR(p.stages[r].transient_bytes, 0.2 * kMB, 1e-6) << kind << " rank " << r;
      EXPECT_EQ(p.stages[r].host_bytes, 0) << kind << " rank " << r;
    }
    // Recomputing every rank's first layer lowers rank 0's peak (its micro-batches wait for their
    // backward holding the input only) and raises none. Where the peak comes after the backward
    // rebuilt the state, it stays: a rank holding one micro-batch, or zb-h1's last rank, whose
    // micro-batches wait for their deferred W with the rebuilt state.
    std::vector<MemoryPolicy> recompute = keep;
    for (int64_t r = 0; r < 4; ++r) recompute[cuts[r]] = MemoryPolicy::Recompute;
    const Prediction q = predict(m, cuts, recompute);
    EXPECT_LT(q.stages[0].activation_bytes, p.stages[0].activation_bytes) << kind;
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_LE(q.stages[r].activation_bytes, p.stages[r].activation_bytes) << kind << " rank " << r;
      EXPECT_EQ(q.stages[r].host_bytes, 0) << kind << " rank " << r;
    }
    // Swapping them puts bytes on the host tier of every rank, and only there.
    std::vector<MemoryPolicy> swap = keep;
    for (int64_t r = 0; r < 4; ++r) swap[cuts[r]] = MemoryPolicy::Swap;
    const Prediction s = predict(m, cuts, swap);
    for (int64_t r = 0; r < 4; ++r) EXPECT_GT(s.stages[r].host_bytes, 0) << kind << " rank " << r;
  }
}

// NOTE [Stage boundaries in the replay], by hand: 1F1B on 2 ranks, 2 micro-batches, one layer of
// 1 MB per rank, 0.1 MB between the stages. Rank 0 runs F0 F1 BW0 BW1 (unit-like costs: F1 ends at
// 2 ms, BW0 starts at 4 ms): after F1 it holds both micro-batches' state and both outputs (an
// output counts until rank 0's own backward of it, by which time the next stage has taken it); at
// BW0 the first output is gone and its gradient has come. 2.2 MB either way.
TEST(MemoryModel, BoundaryMessagesAreHeldUntilTaken) {
  const MemoryModel m{.layers = uniform_layers(2),
                      .schedule = schedule::make_schedule("1f1b", 2, 2),
                      .boundary_bytes = 0.1 * kMB};
  const Prediction p = predict(m, {0, 1, 2}, std::vector<MemoryPolicy>(2, MemoryPolicy::Keep));
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_NEAR(p.stages[0].activation_bytes, 2 * kMB, 1e-6);
  EXPECT_NEAR(p.stages[0].boundary_bytes, 0.2 * kMB, 1e-6);
  EXPECT_NEAR(p.stages[0].total(), 2.2 * kMB, 1e-6);
  EXPECT_NEAR(p.stages[1].activation_bytes, kMB, 1e-6);
  // Rank 1 receives no gradient, and rank 0 takes each input gradient as it is sent.
  EXPECT_NEAR(p.stages[1].boundary_bytes, 0, 1e-6);
  // Without boundary bytes the replay is what it was.
  MemoryModel none = m;
  none.boundary_bytes = 0;
  EXPECT_EQ(predict(none, {0, 1, 2}, std::vector<MemoryPolicy>(2, MemoryPolicy::Keep)).stages[0].boundary_bytes, 0);
}

// NOTE [Backward moments], by hand: one rank, two kept layers of 1 MB, layer 0's backward needing
// 3 MB of temporaries and layer 1's 0.5 MB. A BW runs layer 1 first (0.5 MB beside the whole
// state), then layer 0 once layer 1's 1 MB is freed: 2 MB beyond the state. A split B frees nothing
// before its W: 3 MB.
TEST(MemoryModel, BackwardMomentsFreeAsTheFusedBackwardGoes) {
  std::vector<LayerCosts> layers = uniform_layers(2);
  layers[0].workspace_bytes = 3 * kMB, layers[1].workspace_bytes = 0.5 * kMB;
  const std::vector<MemoryPolicy> keep(2, MemoryPolicy::Keep);
  const MemoryModel fused{.layers = layers, .schedule = schedule::make_schedule("1f1b", 1, 2)};
  EXPECT_NEAR(predict(fused, {0, 2}, keep).stages[0].transient_bytes, 2 * kMB, 1e-6);
  const MemoryModel split{.layers = layers, .schedule = schedule::make_schedule("zb-h1", 1, 2)};
  EXPECT_NEAR(predict(split, {0, 2}, keep).stages[0].transient_bytes, 3 * kMB, 1e-6);
  // The chunk's last layer runs first: its temporaries stand beside everything.
  std::swap(layers[0].workspace_bytes, layers[1].workspace_bytes);
  const MemoryModel last{.layers = layers, .schedule = schedule::make_schedule("1f1b", 1, 2)};
  EXPECT_NEAR(predict(last, {0, 2}, keep).stages[0].transient_bytes, 3 * kMB, 1e-6);
}

TEST(MemoryModel, RecomputeAddsItsForwardPerMicroBatch) {
  // One stage: recomputing layer i lengthens the step by its forward once per micro-batch.
  for (const char* kind : {"gpipe", "1f1b"}) {
    const MemoryModel m{.layers = varied_layers(), .schedule = schedule::make_schedule(kind, 1, 4)};
    const std::vector<int64_t> cuts{0, 8};
    const std::vector<MemoryPolicy> keep(8, MemoryPolicy::Keep);
    const double base = predict(m, cuts, keep).step_s;
    double sum = 0;
    for (const LayerCosts& l : m.layers) sum += l.forward_s + l.backward_input_s + l.backward_weight_s;
    EXPECT_NEAR(base, 4 * sum, 1e-9) << kind;
    for (size_t i = 0; i < 8; ++i) {
      std::vector<MemoryPolicy> policy = keep;
      policy[i] = MemoryPolicy::Recompute;
      EXPECT_NEAR(predict(m, cuts, policy).step_s - base, 4 * m.layers[i].forward_s, 1e-9) << kind << " layer " << i;
    }
    EXPECT_NEAR(predict(m, cuts, std::vector<MemoryPolicy>(8, MemoryPolicy::Recompute)).step_s - base,
                4 * (1 + 2 + 3 + 1 + 2 + 3 + 1 + 2) * kMs, 1e-9)
        << kind;
  }
}

// `n` layers of seeded random times (1 to 4 ms) and bytes (1 to 10 MB saved).
std::vector<LayerCosts> random_layers(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<LayerCosts> layers;
  for (int64_t i = 0; i < n; ++i) {
    const double saved = (1 + 9 * u(rng)) * kMB;
    layers.push_back({.forward_s = (1 + 3 * u(rng)) * kMs,
                      .backward_input_s = (1 + 3 * u(rng)) * kMs,
                      .backward_weight_s = (1 + 3 * u(rng)) * kMs,
                      .saved_bytes = saved,
                      .input_bytes = (0.05 + 0.25 * u(rng)) * saved,
                      .workspace_bytes = 0.5 * u(rng) * kMB,
                      .fixed_bytes = (0.5 + 4.5 * u(rng)) * kMB});
  }
  return layers;
}

// The least, over every policy, of the fullest rank's need on `cuts`, and one policy that needs it.
std::pair<double, std::vector<MemoryPolicy>> least_need(const MemoryModel& m, const std::vector<int64_t>& cuts) {
  const size_t n = m.layers.size();
  size_t total = 1;
  for (size_t i = 0; i < n; ++i) total *= 3;
  std::pair<double, std::vector<MemoryPolicy>> best{std::numeric_limits<double>::infinity(), {}};
  std::vector<MemoryPolicy> policy(n);
  for (size_t code = 0; code < total; ++code) {
    size_t c = code;
    for (size_t i = 0; i < n; ++i) policy[i] = static_cast<MemoryPolicy>(c % 3), c /= 3;
    const std::vector<double> need = rank_needs(m, cuts, predict(m, cuts, policy));
    const double most = *std::max_element(need.begin(), need.end());
    if (most < best.first) best = {most, policy};
  }
  return best;
}

std::string text(const std::vector<MemoryPolicy>& policy) {
  std::string out;
  for (MemoryPolicy p : policy) out += std::string(out.empty() ? "" : " ") + std::string(nn::name_of(p));
  return out;
}

// Random chains of 3..5 layers on one and two ranks: the least any policy needs on a cut (every
// policy tried) against choose_policies. It fits every budget 1%, 10% and 30% above that least
// need, and with a budget nothing fits it reports a need within 1% of it (a greedy choice may miss
// the exact optimum by a little).
TEST(MemoryModel, ChoosesAFittingPolicyWhenOneExists) {
  std::mt19937_64 rng(1616);
  int cases = 0, misses = 0, overstated = 0;
  for (const char* kind : {"1f1b", "gpipe", "zb-h1"})
    for (int64_t pp : {1, 2})
      for (int64_t n = 3; n <= 5; ++n)
        for (int seed = 0; seed < 2; ++seed) {
          MemoryModel m{.layers = random_layers(rng, n),
                        .schedule = schedule::make_schedule(kind, pp, 4),
                        .copy_bytes_per_s = seed == 0 ? 1e9 : 1e12};
          for (const auto& cuts : all_cuts(n, pp)) {
            const auto [least, policy] = least_need(m, cuts);
            for (double over : {1.01, 1.1, 1.3}) {
              m.budget = least * over;
              ++cases;
              if (feasible(m, cuts)) continue;
              if (++misses <= 3)
                ADD_FAILURE() << "choose_policies does not fit " << text(cuts) << " into " << m.budget
                              << " bytes, but [" << text(policy) << "] needs " << least << ":\n"
                              << describe(m);
            }
            m.budget = 1;  // nothing fits: the result should be the least need
            const PolicyChoice choice = choose_policies(m, cuts);
            EXPECT_FALSE(choice.fits);
            const std::vector<double> need = rank_needs(m, cuts, choice.prediction);
            const double most = *std::max_element(need.begin(), need.end());
            if (most > least * 1.01 && ++overstated <= 3)
              ADD_FAILURE() << "with nothing fitting, choose_policies' [" << text(choice.policy) << "] needs " << most
                            << " on " << text(cuts) << ", but [" << text(policy) << "] needs " << least << ":\n"
                            << describe(m);
          }
        }
  EXPECT_EQ(misses, 0) << "choose_policies misses a fitting policy in " << misses << " of " << cases << " cases";
  EXPECT_EQ(overstated, 0) << "choose_policies overstates the least need in " << overstated << " cuts";
}

// Seeded random chains of 4..7 layers on pp = 2 and 3, under several schedules and budgets: the
// budgets sit just above each cut's least need (where few cuts fit) and at fractions of the
// keep-everything need.
struct SearchCase {
  MemoryModel model;
  std::vector<std::vector<int64_t>> feasible_cuts;
};

std::vector<SearchCase> search_cases() {
  std::vector<SearchCase> out;
  std::mt19937_64 rng(16);
  for (const char* kind : {"1f1b", "gpipe", "zb-h1"})
    for (int64_t pp : {2, 3})
      for (int64_t n = 4; n <= 7; ++n)
        for (int seed = 0; seed < 2; ++seed) {
          MemoryModel m{.layers = random_layers(rng, n),
                        .schedule = schedule::make_schedule(kind, pp, 2 * pp),
                        .copy_bytes_per_s = (seed == 0 ? 1e9 : 1e12)};
          const std::vector<std::vector<int64_t>> cuts = all_cuts(n, pp);
          std::vector<double> budgets;
          MemoryModel least = m;
          least.budget = 1;  // each cut's least need: the policy that needs least
          double keep_need = 0;
          for (const auto& c : cuts) {
            const std::vector<double> need = rank_needs(least, c, choose_policies(least, c).prediction);
            budgets.push_back(*std::max_element(need.begin(), need.end()) * (1 + 1e-9));
            const std::vector<double> keep =
                rank_needs(m, c, predict(m, c, std::vector<MemoryPolicy>(m.layers.size(), MemoryPolicy::Keep)));
            keep_need = std::max(keep_need, *std::max_element(keep.begin(), keep.end()));
          }
          for (double f : {0.3, 0.5, 0.7}) budgets.push_back(f * keep_need);
          std::sort(budgets.begin(), budgets.end());
          budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
          for (double b : budgets) {
            SearchCase sc{.model = m};
            sc.model.budget = b;
            for (const auto& c : cuts)
              if (feasible(sc.model, c)) sc.feasible_cuts.push_back(c);
            out.push_back(std::move(sc));
          }
        }
  return out;
}

const std::vector<SearchCase>& cached_search_cases() {
  static const std::vector<SearchCase> cases = search_cases();
  return cases;
}

TEST(MemoryModel, BruteForceFindsFeasibleCuts) {
  // The cases exercise the search: some budgets let only part of the cuts fit, some none.
  size_t some = 0, part = 0, none = 0;
  for (const SearchCase& sc : cached_search_cases()) {
    const size_t total = all_cuts(static_cast<int64_t>(sc.model.layers.size()), sc.model.schedule.stages).size();
    some += !sc.feasible_cuts.empty();
    part += !sc.feasible_cuts.empty() && sc.feasible_cuts.size() < total;
    none += sc.feasible_cuts.empty();
  }
  EXPECT_GT(part, 10u);
  EXPECT_GT(none, 0u);
  EXPECT_GT(some, 10u);
}

TEST(MemoryModel, AutoCutsFeasibleWheneverSomeCutIs) {
  int cases = 0, failures = 0;
  std::map<std::string, int> by_kind;
  for (const SearchCase& sc : cached_search_cases()) {
    if (sc.feasible_cuts.empty()) continue;
    ++cases;
    const std::vector<int64_t> cuts = auto_cuts(sc.model);
    ASSERT_EQ(cuts.size(), static_cast<size_t>(sc.model.schedule.stages + 1));
    if (feasible(sc.model, cuts)) continue;
    ++by_kind[sc.model.schedule.kind + " pp=" + std::to_string(sc.model.schedule.stages)];
    if (++failures <= 3)  // the first few cases in full
      ADD_FAILURE() << "auto_cuts " << text(cuts) << " does not fit, but " << text(sc.feasible_cuts.front())
                    << " (one of " << sc.feasible_cuts.size() << " feasible cuts) does:\n"
                    << describe(sc.model);
  }
  std::string summary;
  for (const auto& [kind, n] : by_kind) summary += " " + kind + ": " + std::to_string(n) + ";";
  EXPECT_EQ(failures, 0) << "auto_cuts infeasible in " << failures << " of " << cases
                         << " cases where some cut is feasible:" << summary;
}

TEST(MemoryModel, PlannedCutsFeasibleWheneverSomeCutIs) {
  // run_plan's decide_memory under parallel.partition = "auto": the fastest of the searched,
  // compute- and memory-balanced cuts that fit; it fits whenever one of the three does.
  int cases = 0, failures = 0;
  std::map<std::string, int> by_kind;
  for (const SearchCase& sc : cached_search_cases()) {
    if (sc.feasible_cuts.empty()) continue;
    ++cases;
    const std::vector<int64_t> tried[] = {auto_cuts(sc.model), compute_cuts(sc.model), memory_cuts(sc.model)};
    if (std::any_of(std::begin(tried), std::end(tried),
                    [&](const std::vector<int64_t>& c) { return feasible(sc.model, c); }))
      continue;
    ++by_kind[sc.model.schedule.kind + " pp=" + std::to_string(sc.model.schedule.stages)];
    if (++failures <= 3)
      ADD_FAILURE() << "none of auto " << text(tried[0]) << ", compute " << text(tried[1]) << ", memory "
                    << text(tried[2]) << " fits, but " << text(sc.feasible_cuts.front()) << " does:\n"
                    << describe(sc.model);
  }
  std::string summary;
  for (const auto& [kind, n] : by_kind) summary += " " + kind + ": " + std::to_string(n) + ";";
  EXPECT_EQ(failures, 0) << "no planned cut fits in " << failures << " of " << cases
                         << " cases where some cut is feasible:" << summary;
}

// A rank's need with every layer kept, as memory_cuts weighs it (no workspace here).
double kept_need(const MemoryModel& m, const std::vector<int64_t>& held, const std::vector<int64_t>& cuts) {
  double most = 0;
  for (int64_t r = 0; r < m.schedule.stages; ++r) {
    double bytes = 0;
    for (int64_t i = cuts[r]; i < cuts[r + 1]; ++i)
      bytes += m.layers[i].fixed_bytes + static_cast<double>(held[r]) * m.layers[i].saved_bytes;
    most = std::max(most, bytes);
  }
  return most;
}

TEST(MemoryModel, MemoryCutsBalanceMemory) {
  // 12 layers of equal time; the last four hold 8x the bytes (a head's logits, say).
  int better = 0;
  for (const char* kind : {"1f1b", "gpipe"})
    for (int64_t pp : {2, 3, 4}) {
      MemoryModel m{.schedule = schedule::make_schedule(kind, pp, 2 * pp)};
      for (int i = 0; i < 12; ++i)
        m.layers.push_back({.forward_s = kMs,
                            .backward_input_s = kMs,
                            .backward_weight_s = kMs,
                            .saved_bytes = (i >= 8 ? 8 : 1) * kMB,
                            .input_bytes = 0.1 * kMB,
                            .fixed_bytes = 0.5 * kMB});
      const std::vector<int64_t> held = schedule::simulate(m.schedule).peak_stashed;
      const std::vector<int64_t> by_memory = memory_cuts(m), by_compute = compute_cuts(m);
      ASSERT_EQ(by_memory.size(), static_cast<size_t>(pp + 1));
      EXPECT_LE(kept_need(m, held, by_memory), kept_need(m, held, by_compute))
          << kind << " pp " << pp << ": memory " << text(by_memory) << ", compute " << text(by_compute);
      better += kept_need(m, held, by_memory) < kept_need(m, held, by_compute);
      // And it is the least such need over every cut.
      double best = std::numeric_limits<double>::infinity();
      for (const auto& c : all_cuts(12, pp)) best = std::min(best, kept_need(m, held, c));
      EXPECT_DOUBLE_EQ(kept_need(m, held, by_memory), best) << kind << " pp " << pp;
    }
  // The time-balanced cut leaves the heavy end's rank fuller in most of these (not all: with pp = 4
  // under 1F1B three heavy layers on the last rank are the least either way).
  EXPECT_GE(better, 4);
}

// balanced_cuts with a slice cost of its place: the min-max over every cut, {} when none is finite.
TEST(MemoryModel, BalancedCutsMinMaxWithImpossibleSlices) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 3 + trial % 6, parts = 1 + trial % std::min<int64_t>(n, 4);
    const double impossible = (trial % 4) * 0.25;  // the share of (k, begin, end) that cannot be
    std::vector<double> table(static_cast<size_t>(parts * (n + 1) * (n + 1)));
    for (double& c : table) c = u(rng) < impossible ? kInf : std::floor(100 * u(rng));
    const schedule::SliceCost cost = [&](int64_t k, int64_t j, int64_t i) {
      return table[static_cast<size_t>((k * (n + 1) + j) * (n + 1) + i)];
    };
    auto worst = [&](const std::vector<int64_t>& c) {
      double w = 0;
      for (int64_t k = 0; k < parts; ++k) w = std::max(w, cost(k, c[k], c[k + 1]));
      return w;
    };
    double best = kInf;
    for (const auto& c : all_cuts(n, parts)) best = std::min(best, worst(c));
    const std::vector<int64_t> cuts = schedule::balanced_cuts(n, parts, cost);
    if (best == kInf) {
      EXPECT_TRUE(cuts.empty()) << "trial " << trial << " returned " << text(cuts);
      continue;
    }
    ASSERT_EQ(cuts.size(), static_cast<size_t>(parts + 1)) << "trial " << trial;
    EXPECT_EQ(cuts.front(), 0);
    EXPECT_EQ(cuts.back(), n);
    for (int64_t k = 0; k < parts; ++k) EXPECT_LT(cuts[k], cuts[k + 1]) << "trial " << trial;
    EXPECT_EQ(worst(cuts), best) << "trial " << trial;
  }
  // Every slice impossible; and only one cut possible.
  EXPECT_TRUE(schedule::balanced_cuts(5, 2, [](int64_t, int64_t, int64_t) { return kInf; }).empty());
  const schedule::SliceCost one = [](int64_t k, int64_t j, int64_t i) {
    return (k == 0 && j == 0 && i == 3) || (k == 1 && j == 3 && i == 5) ? 1.0 : kInf;
  };
  EXPECT_EQ(schedule::balanced_cuts(5, 2, one), (std::vector<int64_t>{0, 3, 5}));
}

}  // namespace
}  // namespace loom::plan

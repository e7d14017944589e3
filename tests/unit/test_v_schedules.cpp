// V-shaped pipelines (NOTE [V-shaped pipelines]) and overlapped pairs (NOTE [Overlapped pairs]):
// the placement, zb-v's closed forms, dualpipe-v against DualPipe's published bubble, pairs in the
// CSV form, the validator, the lowering and the simulator's semantics of a pair.
#include <gtest/gtest.h>

#include <algorithm>

#include "loom/core/error.h"
#include "input_error.h"
#include "loom/schedule/simulator.h"

namespace loom::schedule {
namespace {

// NOTE [V-shaped pipelines]: ZB-V at F = B = W = 1 per chunk and no communication runs in
// 6m + p - 1 (rank p - 1's first input arrives at p - 1; from then on it never waits), a bubble
// of (p - 1) / (6m + p - 1), and every rank stashes 2p chunks at its peak: 1F1B's first rank's p
// micro-batches of a whole stage.
TEST(Schedules, ZbVMeetsItsClosedForms) {
  for (int64_t p : {2, 3, 4, 8}) {
    for (int64_t m : {2 * p, 4 * p, 8 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const Schedule s = make_schedule("zb-v", p, m);
      ASSERT_EQ(s.chunks, 2);
      ASSERT_EQ(s.placement, Placement::V);
      const Simulation sim = simulate(s);
      EXPECT_DOUBLE_EQ(sim.makespan, static_cast<double>(6 * m + p - 1));
      EXPECT_NEAR(sim.bubble_fraction, static_cast<double>(p - 1) / static_cast<double>(6 * m + p - 1), 1e-12);
      EXPECT_EQ(sim.peak_stashed, std::vector<int64_t>(static_cast<size_t>(p), 2 * p));
      EXPECT_EQ(simulate(make_schedule("1f1b", p, m)).peak_stashed.front(), p) << "the stash ZB-V matches, in halves";
    }
  }
}

// The V's placement: rank r holds virtual stages r and 2p - 1 - r, and each is found back.
TEST(Schedules, VPlacementMapsStagesToRanksAndBack) {
  const Schedule s{.stages = 4, .chunks = 2, .placement = Placement::V};
  EXPECT_EQ(s.virtual_stage(0, 0), 0);
  EXPECT_EQ(s.virtual_stage(0, 1), 7);
  EXPECT_EQ(s.virtual_stage(3, 0), 3);
  EXPECT_EQ(s.virtual_stage(3, 1), 4);
  for (int64_t v = 0; v < 8; ++v) EXPECT_EQ(s.virtual_stage(s.rank_of(v), s.chunk_of(v)), v);
  const Schedule loop{.stages = 4, .chunks = 2};
  for (int64_t v = 0; v < 8; ++v) EXPECT_EQ(loop.virtual_stage(loop.rank_of(v), loop.chunk_of(v)), v);
}

// Each rank's idle time: the makespan less what its actions took.
std::vector<double> idle_per_rank(const Simulation& sim) {
  std::vector<double> out;
  for (const auto& list : sim.ranks) {
    double busy = 0;
    for (const TimedAction& t : list) busy += t.end - t.start;
    out.push_back(sim.makespan - busy);
  }
  return out;
}

// NOTE [V-shaped pipelines], dualpipe-v. Its pairs run as loom's executor runs them (overlap 1), at
// F = B = W = 1: zb-v's 6m + p - 1, each rank idle p - 1. Computed together, with F = B >= W and
// a pair taking F&B from B + W (the forward hidden whole) up to F + B + W (not at all), the most
// idle rank waits DualPipe's (PP/2 - 1)(F&B + B' - 3W), PP = 2p stages, B' = B + W its whole
// backward. Every rank stashes 2p + 1 chunks at its peak (DualPipe's PP + 1).
TEST(Schedules, DualPipeVMeetsItsPublishedBubble) {
  for (int64_t p : {2, 3, 4, 8}) {
    for (int64_t m : {2 * p, 4 * p, 8 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const Schedule s = make_schedule("dualpipe-v", p, m);
      ASSERT_EQ(s.chunks, 2);
      ASSERT_EQ(s.placement, Placement::V);
      const Simulation unit = simulate(s);
      EXPECT_DOUBLE_EQ(unit.makespan, static_cast<double>(6 * m + p - 1));
      for (double idle : idle_per_rank(unit)) EXPECT_NEAR(idle, static_cast<double>(p - 1), 1e-9);
      EXPECT_EQ(unit.peak_stashed, std::vector<int64_t>(static_cast<size_t>(p), 2 * p + 1));
      for (const StageCosts chunk : {StageCosts{2, 2, 1, 0}, StageCosts{1, 1, 0.5, 0}, StageCosts{3, 3, 3, 0}}) {
        const double whole = chunk.f + chunk.b + chunk.w;
        for (double fb : {chunk.b + chunk.w, (chunk.b + chunk.w + whole) / 2, 0.99 * whole}) {
          Costs costs{.stages = std::vector<StageCosts>(static_cast<size_t>(2 * p), chunk), .overlap = fb / whole};
          const std::vector<double> idle = idle_per_rank(simulate(s, costs));
          const double published = static_cast<double>(p - 1) * (fb + (chunk.b + chunk.w) - 3 * chunk.w);
          EXPECT_NEAR(*std::max_element(idle.begin(), idle.end()), published, 1e-9)
              << "F=" << chunk.f << " B=" << chunk.b << " W=" << chunk.w << " F&B=" << fb;
        }
      }
    }
  }
}

// Its steady state: rank r overlaps 2 (m - 2p + r + 1) + (p - 1 - r) pairs (the turn's rank one
// fewer), each a forward of one chunk with the whole backward of the other.
TEST(Schedules, DualPipeVOverlapsAForwardWithTheOtherChunksBackward) {
  const int64_t p = 4, m = 16;
  const Schedule s = make_schedule("dualpipe-v", p, m);
  for (int64_t r = 0; r < p; ++r) {
    const auto& list = s.ranks[r];
    int64_t pairs = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].paired) continue;
      ++pairs;
      ASSERT_LT(i + 1, list.size());
      EXPECT_EQ(list[i].op, Op::F);
      EXPECT_EQ(list[i + 1].op, Op::BW);
      EXPECT_EQ(list[i + 1].chunk, 1 - list[i].chunk);
    }
    EXPECT_EQ(pairs, 2 * (m - 2 * p + r + 1) + (p - 1 - r) - (r == p - 1 ? 1 : 0)) << "rank " << r;
  }
}

// Rank 1's F1 has its input at 2, its partner BW0 at 5. As loom's executor runs a pair (overlap 1)
// F1 runs at 2 and BW0 at 5. Computed together (overlap < 1) the pair starts once both could, at
// 5, and its outputs leave when it ends: rank 2's F1 waits for the pair, not for F1 alone.
TEST(Schedules, APairComputedTogetherStartsWhenBothInputsAreInAndHandsOnWhenItEnds) {
  const std::string csv = "step,rank0,rank1,rank2\n0,F0,F0,F0\n1,F1,F1&BW0,BW0\n2,BW0,BW1,F1\n3,BW1,,BW1\n";
  const Simulation apart = simulate(from_csv(csv, "pair.csv"));
  ASSERT_EQ(apart.ranks[1][1].action, (Action{Op::F, 1, 0, true}));
  EXPECT_DOUBLE_EQ(apart.ranks[1][1].start, 2);
  EXPECT_DOUBLE_EQ(apart.ranks[1][2].start, 5);
  const Simulation together = simulate(from_csv(csv, "pair.csv"), Costs{.overlap = 0.5});
  EXPECT_DOUBLE_EQ(together.ranks[1][1].start, 5);
  const double pair_end = 5 + 3 * 0.5;  // (F + BW) x overlap
  EXPECT_DOUBLE_EQ(together.ranks[1][2].end, pair_end);
  EXPECT_DOUBLE_EQ(together.ranks[2][2].start, pair_end);
  EXPECT_NE(loom::testing::input_error([&] { simulate(from_csv(csv, "pair.csv"), Costs{.overlap = 0}); }).find("overlap in (0, 1], not 0"),
            std::string::npos);
}

// One cell holds a pair, `0F3&1BW1`; the CSV reads back to the same lists.
TEST(Schedules, AnOverlappedPairIsOneCsvCell) {
  const Schedule s = make_schedule("dualpipe-v", 2, 4);
  const std::string csv = to_csv(s);
  EXPECT_NE(csv.find(",0F3&1BW1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1F2&0BW0,"), std::string::npos) << csv;
  const Schedule back = from_csv(csv, "v.csv");
  EXPECT_EQ(back.ranks, s.ranks);
  EXPECT_EQ(back.placement, Placement::V);
  EXPECT_NO_THROW(simulate(back));
}

TEST(Schedules, APairThatIsNotAForwardAndAnotherBackwardIsRefused) {
  auto refused = [](const std::string& cells) {
    return loom::testing::input_error([&] { simulate(from_csv("step,rank0\n0," + cells + "\n", "x.csv")); });
  };
  const std::string hint = "an overlapped pair is a forward and then the backward (B or BW) of another micro-batch,";
  EXPECT_NE(refused("F0&F1\n1,BW0\n2,BW1").find("F0 on rank 0 is overlapped with F1; " + hint), std::string::npos);
  EXPECT_NE(refused("F0&BW0").find("F0 on rank 0 is overlapped with BW0; " + hint), std::string::npos);
  EXPECT_NE(refused("0F0&1BW0").find("0F0 on rank 0 is overlapped with 1BW0; " + hint), std::string::npos)
      << "the other chunk's backward of the same micro-batch waits for this forward";
  EXPECT_NE(refused("F0\n1,BW0&F1\n2,BW1").find("BW0 on rank 0 is overlapped with F1; " + hint), std::string::npos);
  EXPECT_NE(refused("F0&").find("'' is not an action"), std::string::npos);
  EXPECT_NE(refused("F0&BW1&W1").find("'BW1&W1' is not an action"), std::string::npos);
}

// The lowering posts both of a pair's receives before its F, the backward's first.
TEST(Schedules, LoweringPostsBothOfAPairsReceivesBeforeItsForward) {
  const Schedule s = make_schedule("dualpipe-v", 3, 6);
  const auto lowered = lower(s);
  const int64_t last = s.virtual_stages() - 1;
  int64_t checked = 0;
  for (int64_t r = 0; r < s.stages; ++r) {
    const auto& list = lowered[r];
    auto at = [&](Op op, const Action& of) {
      const auto it = std::find(list.begin(), list.end(), Action{op, of.mb, of.chunk, op == Op::F && of.paired});
      return it == list.end() ? -1 : static_cast<int64_t>(it - list.begin());
    };
    for (size_t i = 0; i + 1 < s.ranks[r].size(); ++i) {
      const Action &f = s.ranks[r][i], &b = s.ranks[r][i + 1];
      if (!f.paired) continue;
      const int64_t k = at(Op::F, f);
      ASSERT_GE(k, 2);
      const bool receives_f = s.virtual_stage(r, f.chunk) > 0, receives_b = s.virtual_stage(r, b.chunk) < last;
      if (receives_f) EXPECT_EQ(list[k - 1], (Action{Op::RecvF, f.mb, f.chunk}));
      if (receives_b) EXPECT_EQ(list[k - 1 - (receives_f ? 1 : 0)], (Action{Op::RecvB, b.mb, b.chunk}));
      EXPECT_LT(k, at(Op::BW, b));
      EXPECT_EQ(std::count(list.begin(), list.end(), Action{Op::RecvB, b.mb, b.chunk}), receives_b ? 1 : 0);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace loom::schedule

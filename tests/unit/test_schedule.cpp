// Pipeline schedules as data: every generator over many (stages, micro-batches, chunks) replays in
// the simulator without deadlock, and its timeline is checked here independently of the
// simulator's own checks; known bubble fractions; CSV round trips; bad schedules are refused with
// the grid and the failing step.
#include <gtest/gtest.h>

#include <map>

#include "loom/core/error.h"
#include "input_error.h"
#include "loom/schedule/simulator.h"

namespace loom::schedule {
namespace {

struct Shape {
  int64_t stages, microbatches, chunks;
};

std::vector<Shape> shapes(std::string_view kind) {
  std::vector<Shape> out;
  for (int64_t p = 1; p <= 6; ++p)
    for (int64_t m = 1; m <= 12; ++m) {
      if (v_shaped(kind)) {  // a V: two stages or more, enough micro-batches to fill it
        if (p >= 2 && m >= 2 * p) out.push_back({p, m, 1});
      } else if (kind != "interleaved") {
        out.push_back({p, m, 1});
      } else if (m % p == 0)
        for (int64_t c = 2; c <= 3; ++c) out.push_back({p, m, c});
    }
  return out;
}

// The timeline's facts, from the timeline alone: every dependency ended before its dependant
// started, no rank runs two actions at once, and the stash of each rank never goes negative and
// ends at zero.
void expect_valid_timeline(const Schedule& s, const Simulation& sim) {
  std::map<std::tuple<Op, int64_t, int64_t>, TimedAction> at;  // (op, mb, virtual stage)
  for (const auto& list : sim.ranks)
    for (const TimedAction& t : list) at[{t.action.op, t.action.mb, s.virtual_stage(t.rank, t.action.chunk)}] = t;
  auto end_of = [&](Op op, int64_t mb, int64_t v) {
    auto it = at.find({op, mb, v});
    return it == at.end() ? -1.0 : it->second.end;
  };
  const int64_t last = s.virtual_stages() - 1;
  int64_t actions = 0;
  for (const auto& list : sim.ranks) {
    double free = 0;
    int64_t stash = 0;
    for (const TimedAction& t : list) {
      ++actions;
      const int64_t v = s.virtual_stage(t.rank, t.action.chunk), mb = t.action.mb;
      EXPECT_GE(t.start, free) << "rank " << t.rank << " overlaps itself";
      free = t.end;
      switch (t.action.op) {
        case Op::F:
          if (v > 0) EXPECT_LE(end_of(Op::F, mb, v - 1), t.start);
          ++stash;
          break;
        case Op::B:
        case Op::BW: {
          const double f = end_of(Op::F, mb, v);
          EXPECT_TRUE(f >= 0 && f <= t.start) << "B before its F";
          if (v < last) EXPECT_LE(std::max(end_of(Op::B, mb, v + 1), end_of(Op::BW, mb, v + 1)), t.start);
          if (v < last) EXPECT_GE(std::max(end_of(Op::B, mb, v + 1), end_of(Op::BW, mb, v + 1)), 0);
          if (t.action.op == Op::BW) --stash;
          break;
        }
        case Op::W: {
          const double b = end_of(Op::B, mb, v);
          EXPECT_TRUE(b >= 0 && b <= t.start) << "W before its B";
          --stash;
          break;
        }
        case Op::R: {
          const double f = end_of(Op::F, mb, v);
          EXPECT_TRUE(f >= 0 && f <= t.start) << "R before its F";
          const double b = std::max(end_of(Op::B, mb, v), end_of(Op::BW, mb, v));
          EXPECT_GE(b, t.end) << "R after its B";
          break;
        }
        default:
          break;
      }
      EXPECT_GE(stash, 0);
    }
    EXPECT_EQ(stash, 0);
  }
  // Exactly: per micro-batch and virtual stage an F, a BW or a B and a W, and at most one R.
  int64_t expected = 0;
  for (int64_t mb = 0; mb < s.microbatches; ++mb)
    for (int64_t v = 0; v < s.virtual_stages(); ++v)
      expected += 1 + (at.count({Op::BW, mb, v}) ? 1 : 2) + static_cast<int64_t>(at.count({Op::R, mb, v}));
  EXPECT_EQ(actions, expected);
  for (int64_t mb = 0; mb < s.microbatches; ++mb)
    for (int64_t v = 0; v < s.virtual_stages(); ++v) EXPECT_TRUE(at.count({Op::F, mb, v})) << "F" << mb << " v" << v;
}

class Generators : public ::testing::TestWithParam<std::string_view> {};

TEST_P(Generators, EveryShapeReplaysCompleteAndDeadlockFree) {
  for (const Shape& sh : shapes(GetParam())) {
    SCOPED_TRACE(::testing::Message() << GetParam() << " p=" << sh.stages << " m=" << sh.microbatches
                                      << " c=" << sh.chunks);
    const Schedule s = make_schedule(GetParam(), sh.stages, sh.microbatches, sh.chunks);
    const Simulation sim = simulate(s);
    expect_valid_timeline(s, sim);
    EXPECT_GE(sim.bubble_fraction, 0);
    EXPECT_LT(sim.bubble_fraction, 1);
    ASSERT_FALSE(sim.critical_path.empty());
    EXPECT_DOUBLE_EQ(sim.critical_path.back().end, sim.makespan);
    EXPECT_DOUBLE_EQ(sim.critical_path.front().start, 0);
    // A CSV round trip gives the same lists.
    const Schedule back = from_csv(to_csv(s), "test");
    EXPECT_EQ(back.ranks, s.ranks);
    EXPECT_EQ(back.chunks, s.chunks);
    EXPECT_EQ(back.placement, s.placement);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Generators, ::testing::ValuesIn(kScheduleKinds),
                         [](const auto& info) {
                           std::string name(info.param);
                           std::erase(name, '-');
                           return name;
                         });

TEST(Schedules, KnownBubbleFractionsWithEqualCosts) {
  for (int64_t p = 1; p <= 6; ++p) {
    for (int64_t m = p; m <= 3 * p; m += p) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const double one_f_one_b = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      EXPECT_NEAR(simulate(make_schedule("1f1b", p, m)).bubble_fraction, one_f_one_b, 1e-12);
      EXPECT_NEAR(simulate(make_schedule("gpipe", p, m)).bubble_fraction, one_f_one_b, 1e-12);
      // Interleaving c chunks cuts the idle time per rank by c: (p-1) / (c m + p - 1).
      for (int64_t c = 2; c <= 3 && p > 1; ++c)
        EXPECT_NEAR(simulate(make_schedule("interleaved", p, m, c)).bubble_fraction,
                    static_cast<double>(p - 1) / static_cast<double>(c * m + p - 1), 1e-12);
      // ZB-H1 with F = B = W: (p-1)(F + B - W) idle per rank against 3m busy.
      EXPECT_NEAR(simulate(make_schedule("zb-h1", p, m)).bubble_fraction,
                  static_cast<double>(p - 1) / static_cast<double>(3 * m + p - 1), 1e-12);
    }
  }
}

TEST(Schedules, StashedMicroBatchesPerRank) {
  const int64_t p = 4, m = 8;
  EXPECT_EQ(simulate(make_schedule("1f1b", p, m)).peak_stashed, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(simulate(make_schedule("gpipe", p, m)).peak_stashed, (std::vector<int64_t>{8, 8, 8, 8}));
  // ZB-H1: 1F1B's p - r between F and B, plus at most p - 1 waiting only for their W.
  const auto zb = simulate(make_schedule("zb-h1", p, m)).peak_stashed;
  for (int64_t r = 0; r < p; ++r) EXPECT_LE(zb[r], 2 * p - 1 - r);
}

// Merak's shifted critical path: with the same recomputation on every stage but the last, running
// it ahead of the gradient's arrival shortens the critical path against 1F1B, which recomputes
// inside B.
TEST(Schedules, ShiftedCriticalPathIsShorterThanOneFOneBWithTheSameRecomputation) {
  for (int64_t p = 2; p <= 6; ++p) {
    for (int64_t m = p; m <= 3 * p; m += p) {
      Costs costs;
      for (int64_t v = 0; v < p; ++v) costs.stages.push_back({1, 2, 0, v + 1 < p ? 1.0 : 0.0});
      const Simulation baseline = simulate(make_schedule("1f1b", p, m), costs);
      const Simulation scp = simulate(make_schedule("scp", p, m), costs);
      EXPECT_LT(scp.makespan, baseline.makespan) << "p=" << p << " m=" << m;
      // Both do the same work.
      double work_a = 0, work_b = 0;
      for (const auto& list : baseline.ranks)
        for (const auto& t : list) work_a += t.end - t.start;
      for (const auto& list : scp.ranks)
        for (const auto& t : list) work_b += t.end - t.start;
      EXPECT_DOUBLE_EQ(work_a, work_b);
    }
  }
}

// A whole backward takes its own measured time where one is given (it is not always B + W).
TEST(Schedules, ABackwardInOneTakesItsOwnTimeWhereGiven) {
  const Schedule s = make_schedule("1f1b", 1, 2);
  EXPECT_DOUBLE_EQ(simulate(s, Costs{.stages = {StageCosts{1, 2, 1, 0}}}).makespan, 2 * (1 + 2 + 1));
  EXPECT_DOUBLE_EQ(simulate(s, Costs{.stages = {StageCosts{1, 2, 1, 0, 5}}}).makespan, 2 * (1 + 5));
}

TEST(Schedules, LoweringInsertsTheMessagesAroundEachAction) {
  const Schedule s = make_schedule("1f1b", 2, 2);
  auto text = [](const std::vector<Action>& list) {
    std::string out;
    for (const Action& a : list) out += a.text(false) + " ";
    return out;
  };
  const auto lowered = lower(s);
  EXPECT_EQ(text(lowered[0]), "F0 sendF0 F1 sendF1 recvB0 BW0 recvB1 BW1 ");
  EXPECT_EQ(text(lowered[1]), "recvF0 F0 BW0 sendB0 recvF1 F1 BW1 sendB1 ");
}

TEST(Schedules, ADeadlockIsRefusedWithTheGridAndTheStuckSteps) {
  // Rank 0 runs micro-batch 0 to its end before starting 1; rank 1 wants micro-batch 1 first.
  const std::string csv = "step,rank0,rank1\n0,F0,F1\n1,BW0,BW1\n2,F1,F0\n3,BW1,BW0\n";
  const std::string message = loom::testing::input_error([&] { simulate(from_csv(csv, "bad.csv")); });
  EXPECT_NE(message.find("schedule csv deadlocks"), std::string::npos) << message;
  EXPECT_NE(message.find(">> rank 0 step 1: BW0 waits for BW0 on rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find(">> rank 1 step 0: F1 waits for F1 on rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find(" time r0"), std::string::npos) << "the grid: " << message;
}

TEST(Schedules, IncompleteOrMalformedSchedulesAreRefused) {
  EXPECT_NE(loom::testing::input_error([] { simulate(from_csv("step,rank0\n0,F0\n", "x")); }).find("needs one BW or one B and one W"),
            std::string::npos);
  EXPECT_NE(loom::testing::input_error([] { simulate(from_csv("step,rank0\n0,F0\n1,BW0\n2,BW0\n", "x")); }).find("appears twice"),
            std::string::npos);
  EXPECT_NE(loom::testing::input_error([] { simulate(from_csv("step,rank0\n0,BW0\n1,F0\n", "x")); }).find("out of order"),
            std::string::npos);
  EXPECT_NE(loom::testing::input_error([] { from_csv("step,rank0\n0,Q0\n", "x"); }).find("'Q0' is not an action"), std::string::npos);
  EXPECT_NE(loom::testing::input_error([] { make_schedule("interleaved", 4, 6, 2); }).find("multiple of the stages"), std::string::npos);
  EXPECT_NE(loom::testing::input_error([] { make_schedule("1f1b", 4, 8, 2); }).find("one chunk per rank"), std::string::npos);
  EXPECT_NE(loom::testing::input_error([] { make_schedule("pipedream", 4, 8); }).find("\"pipedream\" is not one of: gpipe, 1f1b"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::schedule

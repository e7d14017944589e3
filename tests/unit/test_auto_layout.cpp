// NOTE [parallel.auto]: the key's conflicts with a written layout, where the local cluster is
// cached, which keys a chosen layout replaces, when a cache is measured again or warned of (NOTE
// [Cached cluster], on hand-made caches), and the whole choice on one rank (a cache, a malformed
// cache). The 2-rank measurement and the training run are tests/cli/auto_layout.sh's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/registry.h"
#include "loom/plan/cluster.h"
#include "loom/plan/planner.h"
#include "loom/train/auto_layout.h"
#include "unit/input_error.h"
#include "unit/temp_dir.h"

namespace loom::train {
namespace {

using ::testing::HasSubstr;

using loom::testing::input_error;

Config tiny_auto() {
  Config c;
  c.model.d_model = 64, c.model.n_layers = 2, c.model.n_heads = 2, c.model.seq_len = 32, c.model.vocab = 256;
  c.train.global_batch = 8, c.train.micro_batch = 2;
  c.parallel.auto_layout = true;
  return c;
}

TEST(AutoLayout, RefusesADegreeOrCutsBesideIt) {
  Config c = tiny_auto();
  models::validate_config(c);  // every degree 1: nothing to conflict with
  c.parallel.dp = 2;
  EXPECT_THAT(input_error([&] { models::validate_config(c); }),
              HasSubstr("parallel.auto = true chooses the layout, but the config also sets parallel.dp = 2: they "
                        "conflict; hint: drop it, or set parallel.auto = false"));
  c.parallel.dp = 1, c.parallel.sp = 2, c.parallel.pp_cuts = {1};
  EXPECT_THAT(input_error([&] { models::validate_config(c); }),
              HasSubstr("sets parallel.sp = 2, parallel.pp_cuts = [1]: they conflict; hint: drop them"));
}

TEST(AutoLayout, CachesUnderXdgCacheHomeElseHome) {
  EXPECT_EQ(local_cluster_cache("/x/cache", "/home/u"), "/x/cache/loom/local-cluster.toml");
  EXPECT_EQ(local_cluster_cache("", "/home/u"), "/home/u/.cache/loom/local-cluster.toml");
  EXPECT_EQ(local_cluster_cache("relative", "/home/u"), "/home/u/.cache/loom/local-cluster.toml");  // XDG: ignored
  EXPECT_EQ(local_cluster_cache(nullptr, "/home/u"), "/home/u/.cache/loom/local-cluster.toml");
  EXPECT_THAT(input_error([] { local_cluster_cache(nullptr, nullptr); }),
              HasSubstr("neither XDG_CACHE_HOME (an absolute path) nor HOME is set"));
}

TEST(AutoLayout, TheLayoutKeysComeFromThePlanTheRestFromTheUser) {
  Config user = tiny_auto();
  user.train.lr = 0.5;
  Config chosen = user;
  chosen.parallel.auto_layout = true;
  chosen.parallel.sp = 2, chosen.parallel.sp_mode = SpMode::Ring, chosen.parallel.zero = 1;
  chosen.train.micro_batch = 4, chosen.train.lr = 0.25;
  chosen.memory.recompute = Recompute::Full, chosen.memory.budget = "80GiB";
  Config got = plan::apply_layout(user, chosen);
  EXPECT_FALSE(got.parallel.auto_layout);
  EXPECT_EQ(got.parallel.sp, 2);
  EXPECT_EQ(got.parallel.sp_mode, SpMode::Ring);
  EXPECT_EQ(got.parallel.zero, 1);
  EXPECT_EQ(got.train.micro_batch, 4);
  EXPECT_EQ(got.train.lr, 0.5);                   // not a layout key
  EXPECT_EQ(got.memory.recompute, Recompute::Full);
  EXPECT_EQ(got.memory.budget, "");               // the user's (none): the device's is the plan's assumption
  user.memory.budget = "1GiB";
  EXPECT_EQ(plan::apply_layout(user, chosen).memory.budget, "1GiB");
  user.memory.budget = "";
  chosen.memory.recompute = Recompute::None, chosen.memory.policy = PolicyMode::Auto;  // needs a budget
  EXPECT_EQ(plan::apply_layout(user, chosen).memory.budget, "80GiB");
}

// NOTE [Cached cluster]: hand-made caches (the shipped local cluster with a [measured] record
// edited, written and read back as a cache is) judged for a run of 2 ranks x 1 thread on day 1000.
constexpr int64_t kDay = 86400, kNow = 1000 * kDay;
const std::string kCache = "/cache/loom/local-cluster.toml";

plan::Cluster cache(double days_old, int64_t threads, double peak_share = 1, double spread = 0.02) {
  plan::Cluster c = plan::read_cluster("local");
  c.peak_flops[DType::Float32] *= peak_share;
  c.gemm_max = 0.9;  // a curve not clamped, whatever the shipped file holds
  c.measured = plan::Measurement{.unix_time = kNow - static_cast<int64_t>(days_old * kDay), .ranks = 2,
                                 .threads = threads, .loom_version = "0.2.0", .peak_spread = spread};
  return plan::cluster_from_toml(plan::to_toml(c), kCache);
}

const CacheRun kRun{.ranks = 2, .threads = 1, .now_unix = kNow};

TEST(CachedCluster, AFreshCacheOfTheRunsShapeIsUsedQuietly) {
  const plan::Cluster c = cache(1, 1);
  ASSERT_TRUE(c.measured.has_value());
  EXPECT_EQ(c.measured->threads, 1);
  const CacheVerdict v = judge_cache(c, kRun, kCache);
  EXPECT_FALSE(v.remeasure);
  EXPECT_TRUE(v.warnings.empty());
  const plan::Cluster shipped = plan::read_cluster("local");
  EXPECT_TRUE(measurement_warnings(c, &shipped, kCache).empty());
}

TEST(CachedCluster, AnOldCacheIsMeasuredAgainWithAWarning) {
  EXPECT_FALSE(judge_cache(cache(6.5, 1), kRun, kCache).remeasure);
  const CacheVerdict v = judge_cache(cache(8, 1), kRun, kCache);
  EXPECT_TRUE(v.remeasure);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_THAT(v.warnings[0], HasSubstr("parallel.auto's cached cluster " + kCache + " is stale (measured 8 days "
                                       "ago, more than 7): measuring this machine again for 2 ranks x 1 threads"));
}

TEST(CachedCluster, AnotherThreadOrRankCountIsMeasuredAgain) {
  CacheVerdict v = judge_cache(cache(1, 2), kRun, kCache);
  EXPECT_TRUE(v.remeasure);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_THAT(v.warnings[0], HasSubstr("(measured with 2 threads per rank, the run uses 1)"));
  v = judge_cache(cache(1, 1), {.ranks = 4, .threads = 1, .now_unix = kNow}, kCache);
  EXPECT_TRUE(v.remeasure);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_THAT(v.warnings[0], HasSubstr("(measured for 2 ranks, the run has 4)"));
  plan::Cluster unrecorded = cache(1, 1);  // an older loom's cache
  unrecorded.measured.reset();
  EXPECT_TRUE(judge_cache(unrecorded, kRun, kCache).remeasure);
}

// One rank cannot measure links: it plans on a stale cache, and says how to refresh it.
TEST(CachedCluster, OneRankPlansOnAStaleCacheAndSaysSo) {
  const CacheVerdict v = judge_cache(cache(30, 2), {.ranks = 1, .threads = 1, .now_unix = kNow}, kCache);
  EXPECT_FALSE(v.remeasure);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_THAT(v.warnings[0], HasSubstr("(measured with 2 threads per rank, the run uses 1; measured 30 days ago, "
                                       "more than 7), and 1 rank cannot measure this machine's links: planning on "
                                       "it anyway; hint: run parallel.auto on 2 ranks or more once"));
}

TEST(CachedCluster, AnImplausibleUnstableOrClampedPeakIsWarnedOf) {
  const plan::Cluster shipped = plan::read_cluster("local");
  // A third of the shipped peak per thread (49.5 against 156 GFLOP/s was seen here under load).
  std::vector<std::string> w = measurement_warnings(cache(1, 1, 1.0 / 3), &shipped, kCache);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("parallel.auto's cluster " + kCache + ": its float32 GEMM peak, "));
  EXPECT_THAT(w[0], HasSubstr(" GFLOP/s per thread, is below 50% of the shipped clusters/local.toml's "));
  EXPECT_THAT(w[0], HasSubstr("hint: measure again on a quiet machine: delete " + kCache + " and run parallel.auto "
                              "on 2 ranks, or `mpiexec -n 2 loom profile -c CONFIG --set train.threads=1 "
                              "--cluster-out " + kCache + "`"));
  EXPECT_TRUE(measurement_warnings(cache(1, 1, 0.6), &shipped, kCache).empty());  // slower, not implausible
  EXPECT_TRUE(measurement_warnings(cache(1, 1, 1.0 / 3), nullptr, kCache).empty());  // nothing to compare with
  w = measurement_warnings(cache(1, 1, 1, 0.25), &shipped, kCache);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("its float32 GEMM peak's repeats spread 25% (more than 10%)"));
  plan::Cluster clamped = cache(1, 1);
  clamped.gemm_max = 1;
  w = measurement_warnings(clamped, &shipped, kCache);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("its GEMM curve is clamped (gemm_max = 1"));
}

// Each test's cache in a folder of its own process (ctest runs these cases side by side: one fixed
// folder let one case's TearDown remove another's cache mid-test).
class AutoLayoutOneRank : public ::testing::Test {
 protected:
  void write_cache(const std::string& text) const { std::ofstream(cache_) << text; }

  testing::TempDir dir_{"loom_auto_layout_"};
  std::string cache_ = dir_.path("local-cluster.toml");
  dist::NullCommunicator world_;
};

TEST_F(AutoLayoutOneRank, PlansOnTheCacheAndSaysSo) {
  write_cache(plan::to_toml(plan::read_cluster("dgx-a100-80gb")));
  const AutoLayout chosen = choose_layout(tiny_auto(), world_, cache_);
  const Config& got = chosen.config;
  EXPECT_FALSE(got.parallel.auto_layout);
  EXPECT_EQ(got.parallel.dp * got.parallel.tp * got.parallel.pp * got.parallel.sp, 1);
  EXPECT_EQ(got.memory.budget, "");
  models::validate_config(got);
  EXPECT_THAT(chosen.report, HasSubstr("loom: parallel.auto: planning on the local cluster cached in " + cache_));
  EXPECT_THAT(chosen.report, HasSubstr("\nloom: parallel.auto chose dp 1 x tp 1 x pp 1 x sp 1, micro-batch "));
  EXPECT_THAT(chosen.report, HasSubstr(" s/step, MFU "));
  // A cache without [measured] (as this one, or an older loom's): one rank plans on it, warning.
  ASSERT_EQ(chosen.warnings.size(), 1u);
  EXPECT_THAT(chosen.warnings[0], HasSubstr("it does not say when or how it was measured"));
}

TEST_F(AutoLayoutOneRank, RefusesAMalformedCacheWithTheWayOut) {
  write_cache("name = \"local\"\n[device\n");
  EXPECT_THAT(input_error([&] { choose_layout(tiny_auto(), world_, cache_); }),
              HasSubstr("parallel.auto's cached cluster: " + cache_));
  EXPECT_THAT(input_error([&] { choose_layout(tiny_auto(), world_, cache_); }),
              HasSubstr("hint: delete " + cache_ + " and `loom train` measures this machine again"));
}

}  // namespace
}  // namespace loom::train

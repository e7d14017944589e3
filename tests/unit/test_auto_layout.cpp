// NOTE [parallel.auto]: the key's conflicts with a written layout, where the local cluster is
// cached, which keys a chosen layout replaces, and the whole choice on one rank (a cache, a
// malformed cache). The 2-rank measurement and the training run are tests/cli/auto_layout.sh's.
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

class AutoLayoutOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / "loom-auto-layout";
    std::filesystem::create_directories(dir_);
    cache_ = (dir_ / "local-cluster.toml").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write_cache(const std::string& text) const { std::ofstream(cache_) << text; }

  std::filesystem::path dir_;
  std::string cache_;
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

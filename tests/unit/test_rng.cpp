// Layout-independent initialisation: a shard generated directly equals the same slice of the
// whole parameter, bit for bit, and values depend only on (seed, name, element).
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/nn/param.h"
#include "loom/replicas/flat_params.h"

namespace loom {
namespace {

TEST(Rng, ShardsEqualSlicesOfTheFullTensor) {
  const uint64_t key = stream_key(42, "blocks.0.mlp.up.weight");
  const std::vector<int64_t> shape{6, 10, 4};
  const at::Tensor full = normal_tensor(key, shape, {}, 0.02, at::kDouble);
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (int64_t start = 0; start + 2 <= shape[dim]; start += 2) {
      const at::Tensor shard = normal_tensor(key, shape, Shard{dim, start, 2}, 0.02, at::kDouble);
      EXPECT_TRUE(at::equal(shard, full.narrow(dim, start, 2))) << "dim " << dim << " start " << start;
    }
  }
}

TEST(Rng, ValuesDependOnSeedAndNameOnly) {
  const std::vector<int64_t> shape{64, 64};
  const at::Tensor a = normal_tensor(stream_key(1, "w"), shape, {}, 1.0, at::kDouble);
  EXPECT_TRUE(at::equal(a, normal_tensor(stream_key(1, "w"), shape, {}, 1.0, at::kDouble)));
  EXPECT_FALSE(at::equal(a, normal_tensor(stream_key(2, "w"), shape, {}, 1.0, at::kDouble)));
  EXPECT_FALSE(at::equal(a, normal_tensor(stream_key(1, "v"), shape, {}, 1.0, at::kDouble)));
  // A float32 parameter is the rounded float64 one, so dtypes agree to float32 precision.
  EXPECT_TRUE(at::equal(normal_tensor(stream_key(1, "w"), shape, {}, 1.0, at::kFloat), a.to(at::kFloat)));
}

TEST(Rng, NormalValuesHaveTheRequestedMoments) {
  const at::Tensor x = normal_tensor(stream_key(9, "stats"), {200000}, {}, 0.5, at::kDouble);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(x.std().item<double>(), 0.5, 0.01);
  for (uint64_t c = 0; c < 1000; ++c) {
    const double u = uniform01(123, c);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_LT(uniform_int(123, c, 7), 7u);
  }
}

TEST(Param, InitialisedShardEqualsSliceOfInitialisedParameter) {
  nn::Param full{.name = "embedding.wte", .full_shape = {12, 8}, .init = nn::Init::Normal, .init_std = 0.02};
  nn::Param part = full;
  part.placements = {AxisPlacement::sharded("tp", 0, 1, 3)};  // rows [4, 8) of 12
  nn::initialise(full, 5, at::kFloat);
  nn::initialise(part, 5, at::kFloat);
  EXPECT_TRUE(at::equal(part.value, full.value.narrow(0, 4, 4)));
  EXPECT_EQ(part.grad.sizes(), part.value.sizes());
  EXPECT_EQ(part.grad.abs().sum().item<double>(), 0.0);
}

// NOTE [Parameter placements]: what a parameter's placements say it holds, and what an axis it
// does not name means.
TEST(Param, PlacementsSayWhichPartARankHoldsAndHowItsGradientLies) {
  const nn::Param column{.name = "w", .full_shape = {8, 3}, .placements = {AxisPlacement::sharded("tp", 0, 1, 4)}};
  EXPECT_EQ(column.part(), (Shard{0, 2, 2}));
  EXPECT_EQ(column.part_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(column.numel(), 6);
  EXPECT_EQ(column.value_on("tp"), Placement::shard(0));
  EXPECT_EQ(column.grad_on("tp"), Placement::shard(0));
  EXPECT_EQ(column.value_on("dp"), Placement::replicate());
  EXPECT_EQ(column.grad_on("dp"), Placement::partial());  // a data axis: each rank saw other tokens
  EXPECT_EQ(column.grad_on("sp"), Placement::partial());

  const nn::Param whole{.name = "b", .full_shape = {5}};
  EXPECT_EQ(whole.part(), Shard{});
  EXPECT_EQ(whole.numel(), 5);
  EXPECT_EQ(whole.grad_on("tp"), Placement::replicate());  // a model axis: every rank saw the same tokens

  const nn::Param gain{.name = "g", .full_shape = {5}, .placements = nn::tp_sequence_placements(true)};
  EXPECT_EQ(gain.value_on("tp"), Placement::replicate());
  EXPECT_EQ(gain.grad_on("tp"), Placement::partial());
  EXPECT_TRUE(nn::tp_sequence_placements(false).empty());
}

TEST(Param, AShardThatDoesNotDivideEndsShortOrEmpty) {
  const auto rows = [](int rank) {
    return nn::Param{.name = "t", .full_shape = {97, 5}, .placements = {AxisPlacement::sharded("tp", 0, rank, 4)}}.part();
  };
  EXPECT_EQ(rows(0), (Shard{0, 0, 25}));
  EXPECT_EQ(rows(3), (Shard{0, 75, 22}));
  const nn::Param few{.name = "t", .full_shape = {3, 2}, .placements = {AxisPlacement::sharded("tp", 0, 3, 4)}};
  EXPECT_EQ(few.part(), (Shard{0, 3, 0}));
  EXPECT_EQ(few.numel(), 0);
}

TEST(Param, AFlatRunIsShardedWhereItsParameterIs) {
  const nn::Param column{.name = "w", .full_shape = {8, 3}, .placements = {AxisPlacement::sharded("tp", 0, 1, 4)},
                         .weight_decay = true};
  const nn::Param run = nn::flat_run(column, "w[1:5]", 4);
  EXPECT_EQ(run.numel(), 4);
  EXPECT_TRUE(run.value_on("tp").is_shard());
  EXPECT_TRUE(run.weight_decay);
  EXPECT_FALSE(nn::flat_run(nn::Param{.name = "b", .full_shape = {5}}, "b[0:5]", 5).value_on("tp").is_shard());
}

// The dense path sums every gradient over dp x sp: it takes a parameter only where its gradient is
// a summand over both, and names one that is not.
TEST(Param, TheDensePathTakesOnlyGradientsSummedOverTheDataAxes) {
  EXPECT_NO_THROW(replicas::check_summed_over_data_axes(nn::Param{.name = "b", .full_shape = {5}}));
  EXPECT_NO_THROW(replicas::check_summed_over_data_axes(
      nn::Param{.name = "w", .full_shape = {8, 3}, .placements = {AxisPlacement::sharded("tp", 0, 0, 2)}}));
  const nn::Param expert{.name = "experts.w", .full_shape = {4, 3}, .placements = {AxisPlacement::sharded("dp", 0, 1, 2)}};
  try {
    replicas::check_summed_over_data_axes(expert);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.w's gradient is shard(0) over dp"), std::string::npos) << e.what();
  }
}

TEST(Param, TwoAxesShardingItHaveNoSinglePart) {
  const nn::Param p{.name = "w", .full_shape = {8, 4},
                    .placements = {AxisPlacement::sharded("tp", 0, 0, 2), AxisPlacement::sharded("ep", 1, 0, 2)}};
  EXPECT_THROW((void)p.part(), Error);
}

}  // namespace
}  // namespace loom

// Layout-independent initialisation: a shard generated directly equals the same slice of the
// whole parameter, bit for bit, and values depend only on (seed, name, element).
#include <gtest/gtest.h>

#include "loom/core/rng.h"
#include "loom/nn/param.h"

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
  part.shard = Shard{0, 4, 4};
  nn::initialise(full, 5, at::kFloat);
  nn::initialise(part, 5, at::kFloat);
  EXPECT_TRUE(at::equal(part.value, full.value.narrow(0, 4, 4)));
  EXPECT_EQ(part.grad.sizes(), part.value.sizes());
  EXPECT_EQ(part.grad.abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace loom

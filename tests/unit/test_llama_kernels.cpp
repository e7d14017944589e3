// The kernels of a Llama-style model (RMSNorm, rotary embeddings, SwiGLU, grouped kv heads): each
// forward and explicit backward against libtorch autograd on the same math written with torch
// ops, in float64 (relative error <= 1e-9) and float32; and the properties sequence parallelism
// relies on (a segment's rotary is the slice of the whole sequence's, scores depend only on
// position differences).
#include <cmath>

#include "loom/nn/rms_norm.h"
#include "unit/layer_check.h"

namespace loom::test {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16, kModel = 24, kHeads = 6, kKvHeads = 2, kHeadDim = 8, kTile = 4;
constexpr double kTheta = 10000.0;

class LlamaKernels : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { torch::manual_seed(17); }
  at::ScalarType dtype() const { return GetParam(); }
  double tol() const { return tolerance(dtype()); }
  at::Tensor randn(at::IntArrayRef shape) const { return at::randn(shape, at::TensorOptions().dtype(dtype())); }

};

TEST_P(LlamaKernels, RmsNormMatchesAutograd) {
  nn::RmsNorm norm("blocks.0.norm", kModel);
  ASSERT_EQ(norm.params().size(), 1u);
  nn::initialise(norm.gain, 7, dtype());
  // A random gain (not its init of one), so that a missing gain term cannot hide.
  norm.gain.value = randn({kModel}) * 0.5 + 1.0;
  const at::Tensor x = randn({kBatch, kSeq, kModel}) * 3.0, dy = randn({kBatch, kSeq, kModel});
  const auto out = norm.forward(x);
  const auto grads = norm.backward(dy, x, out.rstd);
  norm.accumulate(grads);
  norm.accumulate(grads);  // two micro-batches: the gradient adds up

  auto x_ref = x.clone().requires_grad_(true), gain_ref = norm.gain.value.clone().requires_grad_(true);
  auto y_ref = x_ref * torch::rsqrt(x_ref.square().mean(-1, true) + 1e-5) * gain_ref;
  y_ref.backward(dy);
  EXPECT_EQ(out.y.scalar_type(), dtype());
  EXPECT_EQ(out.rstd.scalar_type(), dtype()) << "statistics stay in the input's dtype";
  EXPECT_TENSOR_NEAR(out.y, y_ref.detach(), tol());
  EXPECT_TENSOR_NEAR(grads.dx, x_ref.grad(), tol());
  EXPECT_TENSOR_NEAR(grads.dgain, gain_ref.grad(), tol());
  EXPECT_TENSOR_NEAR(norm.gain.grad, 2 * gain_ref.grad(), tol());
}

TEST(RmsNorm, GainStartsAtOneAndIsTpPartialOnlyWhenSequenceSharded) {
  nn::RmsNorm plain("n", kModel), sharded("s", kModel, /*sequence_sharded=*/true);
  nn::initialise(plain.gain, 1, at::kFloat);
  EXPECT_TRUE(at::equal(plain.gain.value, at::ones({kModel})));
  EXPECT_EQ(plain.gain.name, "n.weight");
  EXPECT_FALSE(plain.gain.tp_partial);
  EXPECT_TRUE(sharded.gain.tp_partial);
  EXPECT_FALSE(plain.gain.weight_decay) << "norm gains are not decayed";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlamaKernels, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace loom::test

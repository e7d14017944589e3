// Mixed precision (NOTE [Mixed precision]): every layer of the GPT and the Llama in bfloat16
// against the same layer in float32, on the same float32 master weights.
//
// The tolerances come from bfloat16's unit roundoff u = 2^-8 (8 significant bits): rounding a
// value to bfloat16 changes it by at most a relative u. A product of rounded operands with
// float32 accumulation is off by at most about 2u (one rounding per operand) plus u for the
// result's own rounding, normwise, when nothing cancels. Each layer's output, input gradient and
// weight gradients pass through a short series of such roundings (the input, the weights, the
// norm's output, the projections, the attention's score and probability tiles, the residual
// sum): at most about 12 along the longest path. Worst case they add up to 12u ~ 4.7e-2; as
// independent random errors they add in quadrature (the probabilistic rounding-error bound,
// sqrt(n) u), so the bound used is sqrt(12) u ~ 1.35e-2. Measured (2026-11-30): median 2.7e-3,
// largest 6.8e-3 over every layer, input gradient and weight gradient of both kinds. A type
// mistake (a softmax or a norm statistic left in bfloat16, a gradient accumulated in bfloat16,
// a stale copy) shows as larger errors or as a wrong type, which the type checks catch.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/config.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/model.h"
#include "loom/models/registry.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "tiny_configs.h"
#include "unit/layer_check.h"

namespace loom {
namespace {

constexpr double kUnitRoundoff = 1.0 / 256;  // bfloat16: 2^-8
constexpr double kRoundings = 12;
const double kTolerance = std::sqrt(kRoundings) * kUnitRoundoff;

// small_gpt's and small_llama's models (only `.model` is used: the batch sizes 1, 1 are placeholders)
// at d_model 64, 4 query heads (the Llama's sharing 2 kv heads).
ModelConfig small_model(const std::string& kind) {
  ModelConfig m = kind == "llama"
                      ? test::small_llama(97, /*n_layers=*/1, /*seq_len=*/32, 1, 1, /*kv_heads=*/2).model
                      : test::small_gpt(97, /*n_layers=*/1, /*seq_len=*/32, 1, 1).model;
  m.d_model = 64;
  m.n_heads = 4;
  m.dtype = "float32";  // build() sets the type under test
  return m;
}

models::Model build(const ModelConfig& m, dist::Communicator& tp, DType dtype,
                    Bf16Products products = Bf16Products::Native) {
  ModelConfig typed = m;
  typed.dtype = dtype;
  models::Model model = models::build_model(models::model_kind(m.kind), typed, {.tp = tp}, products);
  model.initialise(7, nn::master_type(dtype));
  for (nn::Param* p : model.params()) nn::refresh_compute(*p, nn::activation_type(dtype));
  return model;
}

nn::MicroBatch microbatch(const ModelConfig& m) {
  at::manual_seed(3);
  nn::MicroBatch mb;
  mb.tokens = at::randint(m.vocab, {2, m.seq_len}, at::kLong);
  mb.targets = at::randint(m.vocab, {2, m.seq_len}, at::kLong);
  mb.loss_scale = 1.0 / static_cast<double>(2 * m.seq_len);
  return mb;
}

// (model kind, bf16 products' path): both paths on any CPU, natively here at these small sizes
// even where libtorch has no fast bfloat16 kernel (NOTE [bf16 products]).
class MixedPrecision : public ::testing::TestWithParam<std::tuple<std::string, Bf16Products>> {};

// Layer by layer: the bfloat16 layer gets the float32 run's input and upstream gradient rounded
// to bfloat16, so each comparison measures that layer's own error, not the chain's.
TEST_P(MixedPrecision, EveryLayerMatchesFloat32WithinRoundoffBound) {
  const auto& [kind, products] = GetParam();
  const ModelConfig m = small_model(kind);
  dist::NullCommunicator tp;
  models::Model wide = build(m, tp, DType::Float32), narrow = build(m, tp, DType::BFloat16, products);
  const nn::MicroBatch mb = microbatch(m);
  const size_t n = wide.chain.size();
  std::vector<at::Tensor> inputs{mb.tokens}, grads(n + 1);
  std::vector<nn::Saved> saved(n);
  for (size_t i = 0; i < n; ++i) inputs.push_back(wide.chain[i]->forward(inputs[i], mb, saved[i]));
  for (size_t i = n; i-- > 0;) {
    grads[i] = wide.chain[i]->backward_input(grads[i + 1], saved[i]);
    wide.chain[i]->backward_weight(saved[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(narrow.chain[i]->name());
    nn::Saved s;
    const at::Tensor x = i == 0 ? inputs[0] : inputs[i].to(at::kBFloat16);
    const at::Tensor y = narrow.chain[i]->forward(x, mb, s);
    const bool last = i + 1 == n;
    // Activations are bfloat16; the loss is float32.
    EXPECT_EQ(y.scalar_type(), last ? at::kFloat : at::kBFloat16);
    EXPECT_LE(test::relative_error(y, inputs[i + 1]), last ? kUnitRoundoff : kTolerance);
    const at::Tensor dx = narrow.chain[i]->backward_input(last ? at::Tensor() : grads[i + 1].to(at::kBFloat16), s);
    narrow.chain[i]->backward_weight(s);
    if (i > 0) {
      EXPECT_EQ(dx.scalar_type(), at::kBFloat16);
      EXPECT_LE(test::relative_error(dx, grads[i]), kTolerance);
    }
    const auto params = narrow.chain[i]->params();
    const auto reference = wide.chain[i]->params();
    for (size_t k = 0; k < params.size(); ++k) {
      SCOPED_TRACE(params[k]->name);
      EXPECT_EQ(params[k]->grad.scalar_type(), at::kFloat);  // accumulated in float32
      EXPECT_EQ(params[k]->compute.scalar_type(), at::kBFloat16);
      EXPECT_LE(test::relative_error(params[k]->grad, reference[k]->grad), kTolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, MixedPrecision,
                         ::testing::Combine(::testing::Values("gpt", "llama"),
                                            ::testing::Values(Bf16Products::Native, Bf16Products::Widened)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(name_of(std::get<1>(info.param)));
                         });

// The products read the copy, and the copy follows the master value after it changes.
TEST(MixedPrecisionParams, ComputeCopyFollowsTheMasterValue) {
  nn::Param p{.name = "w", .full_shape = {4, 4}, .init = nn::Init::Normal, .init_std = 1.0};
  nn::initialise(p, 1, at::kFloat);
  nn::refresh_compute(p, at::kBFloat16);
  ASSERT_TRUE(p.compute.defined());
  EXPECT_TRUE(at::equal(nn::compute_value(p), p.value.to(at::kBFloat16)));
  p.value.add_(1.0);
  nn::refresh_compute(p, at::kBFloat16);
  EXPECT_TRUE(at::equal(nn::compute_value(p), p.value.to(at::kBFloat16)));
  nn::refresh_compute(p, at::kFloat);  // a float32 model keeps no copy
  EXPECT_FALSE(p.compute.defined());
  EXPECT_TRUE(nn::compute_value(p).is_same(p.value));
}

// A weight gradient accumulates over micro-batches in float32: many small bfloat16 terms that a
// bfloat16 accumulator would drop (1 + 1/512 rounds back to 1 in bfloat16) add up exactly.
TEST(MixedPrecisionParams, GradientsAccumulateInFloat32) {
  at::Tensor acc = at::ones({1, 1}, at::kFloat);
  const at::Tensor a = at::full({1, 1}, 1.0 / 512, at::kBFloat16), b = at::ones({1, 1}, at::kBFloat16);
  for (Bf16Products path : {Bf16Products::Native, Bf16Products::Widened}) {
    acc.fill_(1.0);
    for (int i = 0; i < 512; ++i) nn::add_product(acc, a, b, path);
    EXPECT_EQ(acc.item<float>(), 2.0f) << name_of(path);
  }
}

}  // namespace
}  // namespace loom

// Every chain layer's forward and split backward against libtorch autograd on the same math,
// in float64 (relative error <= 1e-9) and float32.
#include <cmath>

#include "loom/dist/null_communicator.h"
#include "loom/nn/attention.h"
#include "loom/blocks/attention_block.h"
#include "loom/blocks/embedding.h"
#include "loom/blocks/final_norm.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/blocks/mlp_block.h"
#include "unit/layer_check.h"

namespace loom::test {
namespace {

namespace F = torch::nn::functional;

constexpr int64_t kBatch = 2, kSeq = 37, kModel = 24, kHeads = 3, kTile = 8, kVocab = 50;

// Parameters get random values (not their GPT init) so that a gain of one or a bias of zero
// cannot hide a missing term.
void randomise(nn::Layer& layer, at::ScalarType dtype) {
  for (nn::Param* p : layer.params()) {
    nn::initialise(*p, 7, dtype);
    p->value = at::randn(p->value.sizes(), p->value.options()) * 0.5;
  }
}

torch::Tensor causal_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t t = q.size(2);
  auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));
  auto mask = torch::ones({t, t}, torch::kBool).triu(1);
  return torch::matmul(scores.masked_fill(mask, -INFINITY).softmax(-1), v);
}

class LayerGradients : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { torch::manual_seed(11); }
  at::ScalarType dtype() const { return GetParam(); }
  at::Tensor randn(at::IntArrayRef shape) const { return at::randn(shape, at::TensorOptions().dtype(dtype())); }
};

TEST_P(LayerGradients, AttentionBlockMatchesAutograd) {
  dist::NullCommunicator tp;
  blocks::AttentionBlock layer("blocks.0.attn", kModel, kHeads, kTile, 0.02, tp);
  randomise(layer, dtype());
  const int64_t hd = kModel / kHeads;
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    auto h = F::layer_norm(x, F::LayerNormFuncOptions({kModel}).weight(p[0]).bias(p[1]).eps(1e-5));
    auto qkv = F::linear(h, p[2].reshape({3 * kModel, kModel}), p[3].reshape({3 * kModel}))
                   .view({kBatch, kSeq, 3, kHeads, hd})
                   .permute({2, 0, 3, 1, 4});
    auto o = causal_reference(qkv[0], qkv[1], qkv[2]).transpose(1, 2).reshape({kBatch, kSeq, kModel});
    return x + F::linear(o, p[4], p[5]);
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, MlpBlockMatchesAutograd) {
  dist::NullCommunicator tp;
  blocks::MlpBlock layer("blocks.0.mlp", kModel, 4 * kModel, 0.02, tp);
  randomise(layer, dtype());
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    auto h = F::layer_norm(x, F::LayerNormFuncOptions({kModel}).weight(p[0]).bias(p[1]).eps(1e-5));
    auto a = torch::gelu(F::linear(h, p[2], p[3]), "tanh");
    return x + F::linear(a, p[4], p[5]);
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, EmbeddingMatchesAutogradWithRepeatedTokens) {
  dist::NullCommunicator tp;
  blocks::TokenPositionEmbedding layer(kVocab, kSeq + 5, kModel, tp);
  randomise(layer, dtype());
  // Few distinct ids, so rows repeat and their gradients must add up.
  const at::Tensor tokens = at::randint(0, 6, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  auto reference = [&](const torch::Tensor& ids, const std::vector<torch::Tensor>& p) {
    return p[0].index_select(0, ids.reshape({-1})).view({kBatch, kSeq, kModel}) + p[1].narrow(0, 0, kSeq);
  };
  check_layer_against_autograd(layer, tokens, {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, FinalNormMatchesAutograd) {
  blocks::FinalNorm layer(kModel);
  randomise(layer, dtype());
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    return F::layer_norm(x, F::LayerNormFuncOptions({kModel}).weight(p[0]).bias(p[1]).eps(1e-5));
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, LmHeadLossMatchesAutogradCrossEntropy) {
  dist::NullCommunicator tp;
  blocks::LmHeadLoss layer(kModel, kVocab, tp);
  randomise(layer, dtype());
  nn::MicroBatch mb;
  mb.targets = at::randint(0, kVocab, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  mb.loss_scale = 1.0 / (3.0 * kBatch * kSeq);  // as if this were one of three micro-batches
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    auto logits = F::linear(x, p[0]).view({-1, kVocab});
    return F::cross_entropy(logits, mb.targets.view({-1}), F::CrossEntropyFuncOptions().reduction(torch::kSum)) *
           mb.loss_scale;
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), mb, reference, {});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerGradients, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace loom::test

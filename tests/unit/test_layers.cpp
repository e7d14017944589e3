// Every chain layer's forward and split backward against libtorch autograd on the same math,
// in float64 (relative error <= 1e-9) and float32 (2e-5): the GPT's, the Llama's (RMSNorm,
// rotary, grouped-query attention, SwiGLU, no biases, a head tied to the token table) and the
// DLRM's; and what each layer's saved state lists after forward against what its cost() says it
// saves (equal, byte for byte).
#include <cmath>
#include <map>
#include <set>

#include "loom/dist/null_communicator.h"
#include "loom/nn/attention.h"
#include "loom/blocks/attention_block.h"
#include "loom/blocks/dlrm_layers.h"
#include "loom/blocks/embedding.h"
#include "loom/blocks/final_norm.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/blocks/mlp_block.h"
#include "unit/layer_check.h"

namespace loom::test {
namespace {

namespace F = torch::nn::functional;

constexpr int64_t kBatch = 2, kSeq = 37, kModel = 24, kHeads = 3, kTile = 8, kVocab = 50;
// The Llama's attention: 4 query heads of 6 dims sharing 2 kv heads; a SwiGLU hidden of 40.
constexpr int64_t kLlamaHeads = 4, kKvHeads = 2, kHidden = 40;
constexpr double kTheta = 10000.0;
const blocks::AttentionShape kLlamaAttention{.d_model = kModel, .n_heads = kLlamaHeads, .n_kv_heads = kKvHeads,
                                             .kernel = {.tile = kTile}, .norm = blocks::NormKind::Rms, .bias = false,
                                             .fused_qkv = false, .rope_theta = kTheta};
const blocks::MlpShape kSwiGlu{.d_model = kModel, .hidden = kHidden, .activation = blocks::MlpActivation::SwiGlu,
                               .norm = blocks::NormKind::Rms, .bias = false};

torch::Tensor causal_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t t = q.size(2);
  auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));
  auto mask = torch::ones({t, t}, torch::kBool).triu(1);
  return torch::matmul(scores.masked_fill(mask, -INFINITY).softmax(-1), v);
}

// Rotary at positions 0..T-1 of x [B, H, T, hd], written with torch ops: pairs (i, i + hd/2),
// angles pos x theta^(-2i/hd) in float64.
torch::Tensor rotary_reference(const torch::Tensor& x) {
  const int64_t t = x.size(2), half = x.size(3) / 2;
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const auto angles = torch::outer(torch::arange(t, f64), torch::pow(kTheta, torch::arange(half, f64) * (-2.0 / (2 * half))));
  const auto cos = angles.cos().to(x.scalar_type()), sin = angles.sin().to(x.scalar_type());
  const auto lo = x.narrow(-1, 0, half), hi = x.narrow(-1, half, half);
  return torch::cat({lo * cos - hi * sin, hi * cos + lo * sin}, -1);
}

class LayerGradients : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { torch::manual_seed(11); }
  at::ScalarType dtype() const { return GetParam(); }
  at::Tensor randn(at::IntArrayRef shape) const { return at::randn(shape, at::TensorOptions().dtype(dtype())); }
};

TEST_P(LayerGradients, AttentionBlockMatchesAutograd) {
  dist::NullCommunicator tp;
  blocks::AttentionBlock layer("blocks.0.attn", {.d_model = kModel, .n_heads = kHeads, .kernel = {.tile = kTile}}, tp);
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
  blocks::MlpBlock layer("blocks.0.mlp", {.d_model = kModel, .hidden = 4 * kModel}, tp);
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

// A slice source over a whole matrix (NOTE [Sliced reads]): each slice a view of it, each slice's
// gradient a buffer of its own added into a whole gradient when done; it counts what it was asked.
class WholeMatrixSlices final : public nn::SliceSource {
 public:
  explicit WholeMatrixSlices(const at::Tensor& whole)
      : whole_(whole), grad_(at::zeros_like(whole)), cut_(whole.size(0)) {}
  at::Tensor value(nn::Param&, int64_t k) override {
    ++values;
    return whole_.narrow(0, cut_.begin(k), cut_.length(k));
  }
  at::Tensor grad(nn::Param&, int64_t k) override {
    EXPECT_FALSE(buffers_.contains(k)) << "slice " << k << "'s gradient asked for twice";
    return buffers_[k] = at::zeros({cut_.length(k), whole_.size(1)}, whole_.options());
  }
  void grad_done(nn::Param&, int64_t k) override {
    grad_.narrow(0, cut_.begin(k), cut_.length(k)).add_(buffers_.at(k));
    buffers_.erase(k);
    ++done;
  }
  const at::Tensor& whole_grad() const { return grad_; }
  int64_t count() const { return cut_.count(); }
  int64_t values = 0, done = 0;

 private:
  at::Tensor whole_, grad_;
  nn::RowSlices cut_;
  std::map<int64_t, at::Tensor> buffers_;
};

// Read in row slices (ZeRO-3's way), the head gives the loss, input gradient and weight gradient
// of its whole matrix; vocab 50 cuts into 13 slices of 4 rows and a last of 2.
TEST_P(LayerGradients, LmHeadLossReadInRowSlicesEqualsTheWholeMatrix) {
  dist::NullCommunicator tp;
  blocks::LmHeadLoss whole(kModel, kVocab, tp), sliced(kModel, kVocab, tp);
  randomise(whole, dtype());
  WholeMatrixSlices source(whole.weight.value);
  sliced.weight.slices = &source;
  nn::MicroBatch mb;
  mb.targets = at::randint(0, kVocab, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  mb.loss_scale = 0.25;
  const at::Tensor x = randn({kBatch, kSeq, kModel});
  const double tolerance = dtype() == at::kDouble ? 1e-12 : 1e-5;
  nn::Saved a, b;
  EXPECT_LE(relative_error(sliced.forward(x, mb, b), whole.forward(x, mb, a)), tolerance);
  EXPECT_LE(relative_error(sliced.backward_input({}, b), whole.backward_input({}, a)), tolerance);
  whole.backward_weight(a);
  sliced.backward_weight(b);
  EXPECT_LE(relative_error(source.whole_grad(), whole.weight.grad), tolerance);
  EXPECT_EQ(source.count(), 13);
  EXPECT_EQ(source.values, 2 * source.count()) << "each slice read in forward and in the input gradient";
  EXPECT_EQ(source.done, source.count()) << "each slice's gradient written once and handed on";
}

TEST_P(LayerGradients, LlamaAttentionBlockMatchesAutograd) {
  dist::NullCommunicator tp;
  blocks::AttentionBlock layer("blocks.0.attn", kLlamaAttention, tp);
  randomise(layer, dtype());
  const int64_t hd = kModel / kLlamaHeads, groups = kLlamaHeads / kKvHeads;
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {  // norm, q, kv, proj
    auto h = rms_norm_reference(x, p[0]);
    auto q = F::linear(h, p[1]).view({kBatch, kSeq, kLlamaHeads, hd}).transpose(1, 2);
    auto kv = F::linear(h, p[2].reshape({2 * kKvHeads * hd, kModel})).view({kBatch, kSeq, 2, kKvHeads, hd});
    auto k = rotary_reference(kv.select(2, 0).transpose(1, 2)).repeat_interleave(groups, 1);
    auto v = kv.select(2, 1).transpose(1, 2).repeat_interleave(groups, 1);
    auto o = causal_reference(rotary_reference(q), k, v).transpose(1, 2).reshape({kBatch, kSeq, kModel});
    return x + F::linear(o, p[3]);
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, SwiGluMlpBlockMatchesAutograd) {
  dist::NullCommunicator tp;
  blocks::MlpBlock layer("blocks.0.mlp", kSwiGlu, tp);
  randomise(layer, dtype());
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {  // norm, gate_up, down
    auto gate_up = F::linear(rms_norm_reference(x, p[0]), p[1].reshape({2 * kHidden, kModel}));
    auto a = F::silu(gate_up.narrow(-1, 0, kHidden)) * gate_up.narrow(-1, kHidden, kHidden);
    return x + F::linear(a, p[2]);
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, RmsFinalNormMatchesAutograd) {
  blocks::FinalNorm layer(kModel, 1, blocks::NormKind::Rms);
  randomise(layer, dtype());
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    return rms_norm_reference(x, p[0]);
  };
  check_layer_against_autograd(layer, randn({kBatch, kSeq, kModel}), {}, reference, randn({kBatch, kSeq, kModel}));
}

TEST_P(LayerGradients, EmbeddingWithoutPositionsMatchesAutograd) {
  dist::NullCommunicator tp;
  blocks::TokenPositionEmbedding layer(kVocab, /*positions=*/0, kModel, tp);
  ASSERT_EQ(layer.params().size(), 1u) << "no position table";
  randomise(layer, dtype());
  const at::Tensor tokens = at::randint(0, 6, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  auto reference = [&](const torch::Tensor& ids, const std::vector<torch::Tensor>& p) {
    return p[0].index_select(0, ids.reshape({-1})).view({kBatch, kSeq, kModel});
  };
  check_layer_against_autograd(layer, tokens, {}, reference, randn({kBatch, kSeq, kModel}));
}

// A head tied to the token table: one Param read by two layers. The head lists no parameter, and
// the table's gradient is the sum of the lookup's and the head's, as autograd sums them.
TEST_P(LayerGradients, TiedHeadAddsItsGradientToTheTokenTable) {
  dist::NullCommunicator tp;
  blocks::TokenPositionEmbedding embedding(kVocab, /*positions=*/0, kModel, tp);
  embedding.token_table.embedding = false;
  blocks::LmHeadLoss head(kModel, kVocab, tp, false, &embedding.token_table);
  EXPECT_TRUE(head.params().empty()) << "the embedding owns the tied table";
  randomise(embedding, dtype());
  nn::Param& table = embedding.token_table;
  nn::MicroBatch mb;
  mb.tokens = at::randint(0, kVocab, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  mb.targets = at::randint(0, kVocab, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  mb.loss_scale = 1.0 / (kBatch * kSeq);
  nn::Saved first, last;
  const at::Tensor loss = head.forward(embedding.forward(mb.tokens, mb, first), mb, last);
  embedding.backward_input(head.backward_input({}, last), first);
  head.backward_weight(last);
  embedding.backward_weight(first);

  auto w = table.value.detach().clone().requires_grad_(true);
  auto logits = F::linear(w.index_select(0, mb.tokens.reshape({-1})), w);
  auto want = F::cross_entropy(logits, mb.targets.reshape({-1}), F::CrossEntropyFuncOptions().reduction(torch::kSum)) *
              mb.loss_scale;
  want.backward();
  EXPECT_TENSOR_NEAR(loss, want.detach(), tolerance(dtype()));
  EXPECT_TENSOR_NEAR(table.grad, w.grad(), tolerance(dtype()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerGradients, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });


// ---- What each layer saves: its state's listed tensors against its cost(). ----

// Sums the bytes of the defined tensors the saved state lists, and checks every name is unique.
double listed_bytes(nn::Saved& saved) {
  double bytes = 0;
  std::set<std::string> names;
  saved.for_each_tensor([&](std::string_view name, at::Tensor& t) {
    EXPECT_TRUE(names.insert(std::string(name)).second) << "listed twice: " << name;
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  });
  return bytes;
}

class SavedTensors : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { torch::manual_seed(5); }
  // After forward the state lists exactly the bytes cost() charges for one micro-batch; after the
  // whole backward nothing.
  void expect_listed_equals_cost(nn::Layer& layer, const at::Tensor& x, const nn::MicroBatch& mb, int64_t seq = kSeq) {
    for (nn::Param* p : layer.params()) nn::initialise(*p, 3, GetParam());
    nn::Saved saved;
    const at::Tensor y = layer.forward(x, mb, saved);
    const int64_t dtype_bytes = GetParam() == at::kDouble ? 8 : 4;
    EXPECT_EQ(listed_bytes(saved), layer.cost(kBatch, seq, dtype_bytes).saved_bytes) << layer.name();
    layer.backward_input(y.dim() == 0 ? at::Tensor() : at::ones_like(y), saved);
    layer.backward_weight(saved);
    EXPECT_EQ(listed_bytes(saved), 0.0) << layer.name();
  }
  at::Tensor activations() const { return at::randn({kBatch, kSeq, kModel}, at::TensorOptions().dtype(GetParam())); }
};

TEST_P(SavedTensors, TransformerBlocksListWhatTheirCostCounts) {
  dist::NullCommunicator tp;
  blocks::AttentionBlock gpt_attention("a", {.d_model = kModel, .n_heads = kHeads, .kernel = {.tile = kTile}}, tp);
  blocks::MlpBlock gpt_mlp("m", {.d_model = kModel, .hidden = 4 * kModel}, tp);
  blocks::AttentionBlock llama_attention("la", kLlamaAttention, tp);
  blocks::MlpBlock llama_mlp("lm", kSwiGlu, tp);
  blocks::FinalNorm layer_norm(kModel), rms_norm(kModel, 1, blocks::NormKind::Rms);
  for (nn::Layer* layer : std::initializer_list<nn::Layer*>{&gpt_attention, &gpt_mlp, &llama_attention, &llama_mlp,
                                                            &layer_norm, &rms_norm})
    expect_listed_equals_cost(*layer, activations(), {}, kSeq);
}

TEST_P(SavedTensors, EmbeddingAndHeadListWhatTheirCostCounts) {
  dist::NullCommunicator tp;
  blocks::TokenPositionEmbedding embedding(kVocab, kSeq, kModel, tp);
  blocks::LmHeadLoss head(kModel, kVocab, tp);
  nn::MicroBatch mb;
  mb.tokens = at::randint(0, kVocab, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  mb.targets = at::randint(0, kVocab, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  expect_listed_equals_cost(embedding, mb.tokens, mb, kSeq);
  expect_listed_equals_cost(head, activations(), mb, kSeq);
}

TEST_P(SavedTensors, DlrmLayersListWhatTheirCostCounts) {
  const auto options = at::TensorOptions().dtype(GetParam());
  blocks::Dense bottom("bottom.0", 5, 8, /*reads_features=*/true), top("top.0", 24, 16, false);
  blocks::EmbeddingBags bags(2, 30, 8, 3);
  blocks::ClickLoss loss(16);
  nn::MicroBatch mb;
  mb.dense = at::randn({kBatch, 5}, at::TensorOptions().dtype(at::kDouble));
  mb.tokens = at::randint(0, 30, {kBatch, 2 * 3}, at::TensorOptions().dtype(at::kLong));
  mb.targets = at::randint(0, 2, {kBatch}, at::TensorOptions().dtype(at::kLong));
  expect_listed_equals_cost(bottom, at::empty({kBatch, 0}, options), mb, 1);  // reads mb.dense
  expect_listed_equals_cost(bags, at::randn({kBatch, 8}, options), mb, 1);
  expect_listed_equals_cost(top, at::randn({kBatch, 24}, options), mb, 1);
  expect_listed_equals_cost(loss, at::randn({kBatch, 16}, options), mb, 1);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SavedTensors, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace loom::test

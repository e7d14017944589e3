// NOTE [Expert routing], NOTE [Mixture-of-experts block]: the routing's choices, capacity and
// index moves, exactly; the block's forward and explicit backward (with the balance loss, drops,
// shared experts, both scores) against autograd in float64.
#include "loom/blocks/moe_block.h"
#include "loom/dist/null_communicator.h"
#include "loom/nn/moe_routing.h"
#include "unit/layer_check.h"

namespace loom::test {
namespace {

const auto kF64 = at::TensorOptions().dtype(at::kDouble);

std::vector<int64_t> column(const at::Tensor& t, int64_t j) {
  const at::Tensor c = t.select(1, j).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

TEST(ExpertRouting, TiesGoToTheLowerExpertIndex) {
  const nn::Routing r = nn::route(at::zeros({5, 4}, kF64), {}, {.experts = 4, .top_k = 2});
  EXPECT_EQ(column(r.expert, 0), std::vector<int64_t>(5, 0));
  EXPECT_EQ(column(r.expert, 1), std::vector<int64_t>(5, 1));
  EXPECT_TRUE(at::equal(r.weight, at::full({5, 2}, 0.5, kF64)));
  // A bias steers the choice, not the weights: expert 3 chosen first, weights still from scores.
  const at::Tensor bias = at::tensor({0.0, 0.0, 0.0, 1.0}, kF64);
  const nn::Routing steered = nn::route(at::zeros({5, 4}, kF64), bias, {.experts = 4, .top_k = 2});
  EXPECT_EQ(column(steered.expert, 0), std::vector<int64_t>(5, 3));
  EXPECT_EQ(column(steered.expert, 1), std::vector<int64_t>(5, 0));
  EXPECT_TRUE(at::equal(steered.weight, at::full({5, 2}, 0.5, kF64)));
}

TEST(ExpertRouting, PermuteGroupsTokensByExpertAndUnpermuteReturnsThemExactly) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({9, 6}, kF64);
  for (int64_t k : {1, 2, 3}) {
    const nn::Routing r = nn::route(at::randn({9, 5}, kF64), {}, {.experts = 5, .top_k = k});
    const at::Tensor rows = nn::permute(x, r);
    ASSERT_EQ(rows.size(0), 9 * k);
    // Expert e's segment holds the tokens that chose it, in token order.
    int64_t at = 0;
    for (int64_t e = 0; e < 5; ++e) {
      for (int64_t t = 0; t < 9; ++t) {
        if (!(r.expert[t] == e).any().item<bool>()) continue;
        EXPECT_TRUE(at::equal(rows[at], x[t])) << "k " << k << " expert " << e << " token " << t;
        ++at;
      }
      EXPECT_EQ(r.counts[static_cast<size_t>(e)], r.chosen[static_cast<size_t>(e)]) << "dropless";
    }
    at::Tensor sum = x.clone();
    for (int64_t j = 1; j < k; ++j) sum.add_(x);
    EXPECT_TRUE(at::equal(nn::unpermute(rows, r), sum)) << "k " << k;
  }
}

TEST(ExpertRouting, UnpermuteIsPermutesTranspose) {
  at::manual_seed(4);
  const nn::Routing r = nn::route(at::randn({11, 4}, kF64), {}, {.experts = 4, .top_k = 2, .capacity_factor = 0.7});
  const at::Tensor x = at::randn({11, 3}, kF64), y = at::randn({r.order.size(0), 3}, kF64);
  const double lhs = (nn::permute(x, r) * y).sum().item<double>(), rhs = (x * nn::unpermute(y, r)).sum().item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(rhs));
}

// Slot-major priority: every token's first choice before any second one, tokens in order.
TEST(ExpertRouting, ACapacityKeepsFirstChoicesFirstAndCountsTheDrops) {
  // Tokens 0, 1 prefer expert 0, tokens 2, 3 expert 1; each chooses both (k = 2). C = ceil(0.5 x 4
  // x 2 / 2) = 2: the four first choices fill both experts, every second choice drops.
  const at::Tensor logits = at::tensor({1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0}, kF64).view({4, 2});
  const nn::RouterOptions options{.experts = 2, .top_k = 2, .capacity_factor = 0.5};
  EXPECT_EQ(nn::expert_capacity(4, options), 2);
  const nn::Routing r = nn::route(logits, {}, options);
  EXPECT_EQ(column(r.kept.to(at::kLong), 0), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(column(r.kept.to(at::kLong), 1), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(r.counts, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.chosen, (std::vector<int64_t>{4, 4}));
  // Every token to expert 0, k = 1, C = ceil(0.5 x 8 / 2) = 2: tokens 0 and 1 kept.
  const at::Tensor one_sided = at::tensor({5.0, 0.0}, kF64).repeat({8, 1});
  const nn::Routing s = nn::route(one_sided, {}, {.experts = 2, .top_k = 1, .capacity_factor = 0.5});
  EXPECT_EQ(column(s.kept.to(at::kLong), 0), (std::vector<int64_t>{1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(s.dropped, 6);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{2, 0}));
  // A dropped assignment adds nothing.
  const at::Tensor rows = at::ones({2, 3}, kF64);
  const at::Tensor combined = nn::combine(rows, s);
  EXPECT_TRUE(at::equal(combined.narrow(0, 2, 6), at::zeros({6, 3}, kF64)));
  EXPECT_TRUE(at::equal(combined.narrow(0, 0, 2), at::ones({2, 3}, kF64)));
}

TEST(ExpertRouting, TheBalanceLossIsOneWhenRoutingIsUniform) {
  // Four tokens over four experts, one each, equal scores: f_i = P_i = 1/4, E sum f P = 1.
  const at::Tensor logits = at::eye(4, kF64) * 1e-9;
  const nn::Routing r = nn::route(logits, {}, {.experts = 4, .top_k = 1});
  EXPECT_EQ(r.chosen, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_NEAR(nn::aux_loss(r).value, 1.0, 1e-8);
}

// NOTE [Experts over sequence parallelism]: two sequences of 6 tokens split into chunks of 3 over
// two "ranks" (rank 0 the first chunk of each, rank 1 the second), routed apart with each other's
// sums: every choice, drop and the balance loss are the whole micro-batch's.
TEST(ExpertRouting, ChunksOfAMicroBatchRouteAsTheWhole) {
  const nn::RouterOptions o{.experts = 3, .top_k = 2, .capacity_factor = 0.5};
  const at::Tensor logits = at::randn({2, 6, 3}, kF64).mul_(2);
  const nn::Routing whole = nn::route(logits.reshape({-1, 3}), {}, o);
  ASSERT_GT(whole.dropped, 0) << "a capacity of 0.5 must drop";
  std::vector<at::Tensor> parts, cells, locals(2);
  for (int64_t r = 0; r < 2; ++r) {
    parts.push_back(logits.narrow(1, 3 * r, 3).reshape({-1, 3}));
    cells.push_back(at::tensor({r, r, r, 2 + r, 2 + r, 2 + r}, at::TensorOptions().dtype(at::kLong)));
  }
  for (int64_t r = 0; r < 2; ++r)  // each rank's own sums first
    nn::route(parts[r], {}, o, {.cell = cells[r], .cells = 4, .sum = [&](at::Tensor& t) { locals[r] = t.clone(); }});
  for (int64_t r = 0; r < 2; ++r) {
    const nn::Routing got =
        nn::route(parts[r], {}, o, {.cell = cells[r], .cells = 4, .sum = [&](at::Tensor& t) { t.add_(locals[1 - r]); }});
    const at::Tensor mine = whole.kept.view({2, 6, 2}).narrow(1, 3 * r, 3).reshape({-1, 2});
    EXPECT_TRUE(at::equal(got.kept, mine)) << "rank " << r;
    EXPECT_EQ(got.batch_tokens, 12);
    EXPECT_TRUE(at::equal(got.batch_chosen, at::tensor(whole.chosen, kF64)));
    EXPECT_NEAR(nn::aux_loss(got).value, nn::aux_loss(whole).value, 1e-15);
    const at::Tensor want_ds = nn::aux_loss(whole).dscores.view({2, 6, 3}).narrow(1, 3 * r, 3).reshape({-1, 3});
    EXPECT_TRUE(at::allclose(nn::aux_loss(got).dscores, want_ds, 0, 1e-15));
  }
}

// NOTE [Expert balance]: each expert above the mean load loses a step, each below gains one, one at
// the mean keeps its bias; the comparison is in integers (13 over 4 experts has no exact mean).
TEST(ExpertBalance, TheBiasMovesAgainstTheLoadBySteps) {
  at::Tensor bias = at::tensor({0.5, 0.0, -0.25, 0.0}, kF64);
  nn::update_balance_bias(bias, {4, 3, 3, 3}, 0.125);  // mean 3.25
  EXPECT_TRUE(at::equal(bias, at::tensor({0.375, 0.125, -0.125, 0.125}, kF64)));
  nn::update_balance_bias(bias, {2, 2, 2, 2}, 0.125);  // balanced: nothing moves
  EXPECT_TRUE(at::equal(bias, at::tensor({0.375, 0.125, -0.125, 0.125}, kF64)));
  nn::update_balance_bias(bias, {8, 0, 0, 0}, 1.0);
  EXPECT_TRUE(at::equal(bias, at::tensor({-0.625, 1.125, 0.875, 1.125}, kF64)));
}

// One training pass of `layer` over x [2, 5, d] with a router of zeros: equal scores, so every
// token's choice is the tie's, expert 0.
void train_with_zero_router(blocks::MoeBlock& layer, const at::Tensor& x) {
  layer.router.value.zero_();
  nn::Saved saved;
  layer.forward(x, {}, saved);
  EXPECT_EQ(layer.last_load().counts, (std::vector<int64_t>{10, 0, 0}));
  layer.backward_input(at::randn(x.sizes(), kF64), saved);
  layer.backward_weight(saved);
  EXPECT_TRUE(saved.empty());
}

// A block balancing by bias: equal scores send every token to expert 0 (the tie); the loads move
// the bias, and the next routing's choice goes elsewhere while its weights stay the scores'.
TEST(ExpertBalance, ABlockSteersAwayFromItsBusiestExpertAndSavesItsBias) {
  dist::NullCommunicator tp;
  blocks::MoeBlock layer("blocks.0.moe",
                         {.d_model = 8, .hidden = 6, .router = {.experts = 3, .top_k = 1},
                          .balance = MoeBalance::Bias, .bias_rate = 0.01},
                         tp);
  randomise(layer, at::kDouble);
  ASSERT_EQ(layer.buffers().size(), 1u);
  EXPECT_EQ(layer.buffers()[0].name, "blocks.0.moe.router.bias");
  const at::Tensor x = at::randn({2, 5, 8}, kF64);
  train_with_zero_router(layer, x);
  const blocks::MoeLoad load = layer.take_trained_load();
  EXPECT_EQ(load.chosen, (std::vector<int64_t>{10, 0, 0}));
  layer.balance(load.chosen);
  EXPECT_TRUE(at::equal(layer.buffers()[0].value, at::tensor({-0.01, 0.01, 0.01}, kF64)));
  nn::Saved saved;
  layer.forward(x, {}, saved);
  EXPECT_EQ(layer.last_load().counts, (std::vector<int64_t>{0, 10, 0})) << "the tie among the raised ones";
  // Without the balance the block has no buffer and its choice stays put.
  blocks::MoeBlock plain("blocks.0.moe", {.d_model = 8, .hidden = 6, .router = {.experts = 3, .top_k = 1}}, tp);
  EXPECT_TRUE(plain.buffers().empty());
}

// Experts never chosen: empty segments, no product, gradients of exactly zero.
TEST(MoeBlock, AnExpertWithoutTokensRunsNothingAndGetsNoGradient) {
  dist::NullCommunicator tp;
  blocks::MoeBlock layer("blocks.0.moe", {.d_model = 8, .hidden = 6, .router = {.experts = 3, .top_k = 1}, .aux_coef = 0.1},
                         tp);
  randomise(layer, at::kDouble);
  train_with_zero_router(layer, at::randn({2, 5, 8}, kF64));
  for (int64_t e : {1, 2}) {
    EXPECT_EQ(layer.gate_up.grad[e].abs().sum().item<double>(), 0.0) << e;
    EXPECT_EQ(layer.down.grad[e].abs().sum().item<double>(), 0.0) << e;
  }
  EXPECT_GT(layer.gate_up.grad[0].abs().sum().item<double>(), 0.0);
  EXPECT_GT(layer.router.grad.abs().sum().item<double>(), 0.0) << "the balance loss still moves the router";
}

struct MoeCase {
  const char* name;
  nn::MoeScore score;
  double capacity_factor;
  int64_t shared;
  double aux_coef;
  blocks::NormKind norm = blocks::NormKind::Rms;  // a GPT's block: LayerNorm (gain and bias)
};

class MoeGradients : public ::testing::TestWithParam<std::tuple<MoeCase, at::ScalarType>> {};

// The block against autograd on the same math: the discrete choice from nn::route (tested above),
// everything differentiable written with torch ops; the balance loss joins through dy's direction
// (y + (L - L.detach()) dy / |dy|^2 adds exactly L to sum(y dy)).
TEST_P(MoeGradients, MatchAutograd) {
  const auto& [c, dtype] = GetParam();
  constexpr int64_t kModel = 16, kHidden = 12, kExperts = 4, kTopK = 2;
  dist::NullCommunicator tp;
  const blocks::MoeShape shape{.d_model = kModel, .hidden = kHidden, .shared = c.shared,
                               .router = {.experts = kExperts, .top_k = kTopK, .score = c.score,
                                          .capacity_factor = c.capacity_factor},
                               .aux_coef = c.aux_coef, .norm = c.norm};
  blocks::MoeBlock layer("blocks.1.moe", shape, tp);
  at::manual_seed(11);
  randomise(layer, dtype);
  const auto options = at::TensorOptions().dtype(dtype);
  const at::Tensor x = at::randn({2, 13, kModel}, options), dy = at::randn({2, 13, kModel}, options);
  const nn::MicroBatch mb{.loss_scale = 0.125};
  auto reference = [&](const torch::Tensor& xr, const std::vector<torch::Tensor>& all) {
    const bool layer_norm = c.norm == blocks::NormKind::Layer;
    const std::vector<torch::Tensor> p(all.begin() + (layer_norm ? 1 : 0), all.end());  // p[0]: the gain
    const auto normed = layer_norm ? torch::nn::functional::layer_norm(
                                         xr, torch::nn::functional::LayerNormFuncOptions({kModel}).weight(all[0]).bias(all[1]).eps(1e-5))
                                   : rms_norm_reference(xr, p[0]);
    const auto h = normed.reshape({-1, kModel});
    const auto z = torch::matmul(h, p[1].t());
    const auto s = c.score == nn::MoeScore::Softmax ? torch::softmax(z, 1) : torch::sigmoid(z);
    const nn::Routing r = nn::route(z.detach(), {}, shape.router);
    const auto chosen = s.gather(1, r.expert);
    const auto w = chosen / chosen.sum(1, true);
    auto out = torch::zeros_like(h);
    for (int64_t e = 0; e < kExperts; ++e) {
      const auto slots = (r.expert == e).logical_and(r.kept).nonzero();  // [m, 2]: token, slot
      if (slots.size(0) == 0) continue;
      const auto tokens = slots.select(1, 0), picked = slots.select(1, 0) * kTopK + slots.select(1, 1);
      const auto u = torch::matmul(h.index_select(0, tokens), p[2][e].t());
      const auto a = torch::silu(u.narrow(1, 0, kHidden)) * u.narrow(1, kHidden, kHidden);
      const auto o = torch::matmul(a, p[3][e].t()) * w.reshape({-1}).index_select(0, picked).unsqueeze(1);
      out = out.index_add(0, tokens, o);
    }
    auto y = xr + out.view(xr.sizes());
    if (c.shared > 0) {
      const int64_t width = c.shared * kHidden;
      const auto u = torch::matmul(h, p[4].reshape({2 * width, kModel}).t());
      const auto a = torch::silu(u.narrow(1, 0, width)) * u.narrow(1, width, width);
      y = y + torch::matmul(a, p[5].t()).view(xr.sizes());
    }
    if (c.aux_coef > 0) {
      const auto f = torch::tensor(r.chosen, torch::kLong).to(s.scalar_type()) / static_cast<double>(26 * kTopK);
      const auto loss = (f * (s / s.sum(1, true)).mean(0)).sum() * (kExperts * c.aux_coef * mb.loss_scale * 26);
      y = y + (loss - loss.detach()) * dy / dy.square().sum();
    }
    return y;
  };
  check_layer_against_autograd(layer, x, mb, reference, dy);
  EXPECT_EQ(layer.last_load().dropped > 0, c.capacity_factor > 0 && c.capacity_factor < 1);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeGradients,
    ::testing::Combine(::testing::Values(MoeCase{"softmax_dropless", nn::MoeScore::Softmax, 0.0, 0, 0.0},
                                         MoeCase{"softmax_aux_capacity", nn::MoeScore::Softmax, 0.6, 0, 0.05},
                                         MoeCase{"sigmoid_aux_shared", nn::MoeScore::Sigmoid, 0.0, 1, 0.05},
                                         MoeCase{"sigmoid_capacity_shared", nn::MoeScore::Sigmoid, 0.6, 2, 0.0},
                                         MoeCase{"layer_norm_aux_shared", nn::MoeScore::Softmax, 0.0, 1, 0.05,
                                                 blocks::NormKind::Layer}),
                       ::testing::Values(at::kDouble, at::kFloat)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) == at::kDouble ? "_f64" : "_f32");
    });

}  // namespace
}  // namespace loom::test

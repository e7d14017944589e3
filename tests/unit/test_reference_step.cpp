// An independent reference for a whole training step of the GPT.
//
// Every other trainer-level test compares loom with loom (one layout against another), so a
// mistake shared by all layouts (a wrong loss normalisation, a dropped term in a layer, a wrong
// learning rate or weight-decay set) would pass them all. Here the GPT is written once more with
// plain libtorch autograd ops: a hand-written LayerNorm and GELU-tanh, causal attention through a
// full masked softmax (loom uses tiles with an online softmax), cross-entropy as the mean over
// the global batch's tokens computed in one pass (loom sums micro-batches scaled by loss_scale),
// and AdamW, clipping and the LR schedule written from their documented formulas. The reference
// starts from loom's initial weights and reads the data straight from the synthetic Markov
// source in the sampler's documented order (step s holds samples [s gb, (s + 1) gb)).
//
// The Llama is written the same way (its own RMSNorm, rotate-half rotary at positions 0..T-1,
// SwiGLU, grouped kv heads by repetition, an optional head tied to the token table) and checked
// for one step: loss, every gradient and the AdamW update; so is the Llama with experts (topk, the
// capacity by counting, a product per token and choice, the balance loss per micro-batch).
//
// In float64 (relative 1e-9) it proves for the serial Trainer: the step's loss; every
// parameter's gradient, accumulated over two micro-batches; the AdamW update with decoupled
// weight decay on exactly the matrices; global-norm clipping; and, over two steps, that the
// moments and bias corrections carry over and that non-zero biases and non-unit gains (zero and
// one at initialisation, so invisible in step 1) enter the forward and backward correctly.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <numbers>

#include "loom/data/markov_source.h"
#include "loom/dist/null_communicator.h"
#include "loom/train/trainer.h"
#include "tiny_configs.h"
#include "unit/layer_check.h"
#include "unit/reference_step.h"

namespace loom::train {
namespace {

using namespace reference;  // NOLINT: the shared reference pieces (unit/reference_step.h)

// small_gpt: float64, attention tiles of 8 (two key tiles per sequence: the online softmax's
// rescaling runs), lr 1e-2, and the table path "off" (the token table's gradient is dense and
// lives in Param::grad).
Config reference_config(double clip, int64_t steps, int64_t warmup) {
  Config c = test::small_gpt(/*vocab=*/64, /*n_layers=*/2, /*seq_len=*/16, /*global_batch=*/4,
                             /*micro_batch=*/2);  // two micro-batches: gradient accumulation
  c.train.steps = steps;
  c.train.warmup = warmup;
  c.train.weight_decay = 0.1;
  c.train.beta1 = kBeta1;
  c.train.beta2 = kBeta2;
  c.train.clip = clip;
  c.parallel.bucket_mb = 25;  // one bucket
  c.data.source = "synthetic";
  return c;
}

// What loom did, read from its parameters.
struct LoomRun {
  std::vector<StepRecord> records;
  Weights initial, grads, values;  // grads: the last step's (clipped in place when clip > 0)
  std::map<std::string, bool> decays;
};

LoomRun run_loom(const Config& c) {
  dist::NullCommunicator world;
  Trainer trainer(c, world);
  LoomRun r;
  for (nn::Param* p : trainer.model().params()) r.initial[p->name] = trainer.value_of(*p).clone();
  r.records = trainer.run({.peak_flops = 1e9});
  for (nn::Param* p : trainer.model().params()) {
    r.grads[p->name] = p->grad.clone();
    r.values[p->name] = trainer.value_of(*p).clone();
    r.decays[p->name] = p->weight_decay;
  }
  return r;
}

// The whole global batch of `step`: windows of seq + 1 tokens, inputs and next-token targets.
struct Batch {
  torch::Tensor tokens, targets;  // [global_batch, seq] int64
};

Batch global_batch(const Config& c, int64_t step) {
  const data::MarkovSource source(c.model.vocab, static_cast<uint64_t>(c.train.seed));
  const int64_t n = c.train.global_batch, t = c.model.seq_len;
  torch::Tensor windows = torch::empty({n, t + 1}, torch::kLong);
  for (int64_t r = 0; r < n; ++r) source.window(step * n + r, t + 1, windows[r].data_ptr<int64_t>());
  return {windows.narrow(1, 0, t), windows.narrow(1, 1, t)};
}

// ---- The reference model: plain autograd ops, nothing of loom's layers. ----

torch::Tensor layer_norm(const torch::Tensor& x, const Weights& w, const std::string& name) {
  const torch::Tensor mean = x.mean(-1, /*keepdim=*/true);
  const torch::Tensor var = (x - mean).pow(2).mean(-1, /*keepdim=*/true);  // biased, as LayerNorm
  return (x - mean) / (var + 1e-5).sqrt() * w.at(name + ".weight") + w.at(name + ".bias");
}

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + torch::tanh(c * (x + 0.044715 * x.pow(3))));
}

torch::Tensor affine(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {}) {
  torch::Tensor y = torch::matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

// x + proj(attention(ln(x))); qkv's weight is [3, d, d]: q, k, v blocks, each head-major.
torch::Tensor attention_block(const torch::Tensor& x, const Weights& w, const std::string& p, int64_t heads) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
  const torch::Tensor h = layer_norm(x, w, p + ".norm");
  const torch::Tensor weight = w.at(p + ".qkv.weight").reshape({3 * d, d});
  const torch::Tensor bias = w.at(p + ".qkv.bias").reshape({3 * d});
  // [3, b, heads, t, hd]: q, k, v
  const torch::Tensor qkv = affine(h, weight, bias).view({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});
  const torch::Tensor scores = torch::matmul(qkv[0], qkv[1].transpose(-1, -2)) / std::sqrt(static_cast<double>(hd));
  const torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);  // key j > query i
  const torch::Tensor probs = scores.masked_fill(future, -INFINITY).softmax(-1);
  const torch::Tensor merged = torch::matmul(probs, qkv[2]).transpose(1, 2).reshape({b, t, d});
  return x + affine(merged, w.at(p + ".proj.weight"), w.at(p + ".proj.bias"));
}

torch::Tensor mlp_block(const torch::Tensor& x, const Weights& w, const std::string& p) {
  const torch::Tensor u = affine(layer_norm(x, w, p + ".norm"), w.at(p + ".up.weight"), w.at(p + ".up.bias"));
  return x + affine(gelu_tanh(u), w.at(p + ".down.weight"), w.at(p + ".down.bias"));
}

// ---- The reference Llama: its own RMSNorm, rotary, SwiGLU and grouped heads by repetition. ----

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& gain) {
  return x / (x.pow(2).mean(-1, /*keepdim=*/true) + 1e-5).sqrt() * gain;
}

// x [b, heads, t, hd] rotated at positions 0..t-1: the pair (i, i + hd/2) by pos x theta^(-2i/hd).
torch::Tensor rotate_half_pairs(const torch::Tensor& x, double theta) {
  const int64_t t = x.size(2), half = x.size(3) / 2;
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor exponent = torch::arange(half, f64) * (2.0 / static_cast<double>(2 * half));
  const torch::Tensor angle = torch::arange(t, f64).unsqueeze(1) / torch::pow(theta, exponent).unsqueeze(0);
  const torch::Tensor lo = x.narrow(-1, 0, half), hi = x.narrow(-1, half, half);
  return torch::cat({lo * angle.cos() - hi * angle.sin(), lo * angle.sin() + hi * angle.cos()}, -1);
}

// x + proj(attention(rotary(q), rotary(k), v)) on rmsnorm(x); kv's weight is [2, kv heads x hd, d]
// (k then v), and query head j reads kv head j / (heads / kv heads).
torch::Tensor llama_attention(const torch::Tensor& x, const Weights& w, const std::string& p, const ModelConfig& m) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / m.n_heads, kv_heads = m.n_kv_heads;
  const torch::Tensor h = rms_norm(x, w.at(p + ".norm.weight"));
  const torch::Tensor q = affine(h, w.at(p + ".q.weight")).view({b, t, m.n_heads, hd}).transpose(1, 2);
  const torch::Tensor kv = affine(h, w.at(p + ".kv.weight").reshape({2 * kv_heads * hd, d})).view({b, t, 2, kv_heads, hd});
  const int64_t repeat = m.n_heads / kv_heads;
  const torch::Tensor k = rotate_half_pairs(kv.select(2, 0).transpose(1, 2), m.rope_theta).repeat_interleave(repeat, 1);
  const torch::Tensor v = kv.select(2, 1).transpose(1, 2).repeat_interleave(repeat, 1);
  const torch::Tensor scores =
      torch::matmul(rotate_half_pairs(q, m.rope_theta), k.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd));
  const torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
  const torch::Tensor merged = torch::matmul(scores.masked_fill(future, -INFINITY).softmax(-1), v);
  return x + affine(merged.transpose(1, 2).reshape({b, t, d}), w.at(p + ".proj.weight"));
}

// x + down(silu(gate) * up) on rmsnorm(x); gate_up's weight is [2, hidden, d] (gate then up).
torch::Tensor llama_mlp(const torch::Tensor& x, const Weights& w, const std::string& p) {
  const torch::Tensor gate_up = w.at(p + ".gate_up.weight");
  const torch::Tensor h = rms_norm(x, w.at(p + ".norm.weight"));
  const torch::Tensor gate = affine(h, gate_up[0]), up = affine(h, gate_up[1]);
  return x + affine(gate * torch::sigmoid(gate) * up, w.at(p + ".down.weight"));
}

// ---- The reference experts: top-k by topk, the capacity by counting, a product per choice. ----

// x + sum_j w_j expert_{e_j}(h) + shared(h) on h = rmsnorm(x), x one micro-batch; adds the
// block's balance loss E sum_i f_i P_i to `aux`. The weights w_j are the chosen scores over their
// sum; with a capacity an expert takes the first ceil(c T k / E) of the choices, all tokens'
// first choices before any second one.
torch::Tensor llama_experts(const torch::Tensor& x, const Weights& w, const std::string& p, const ModelConfig& m,
                            torch::Tensor& aux) {
  const int64_t d = m.d_model, experts = m.moe_experts, k = m.moe_top_k;
  const torch::Tensor h = rms_norm(x, w.at(p + ".norm.weight")).reshape({-1, d});
  const int64_t tokens = h.size(0);
  const torch::Tensor z = affine(h, w.at(p + ".router.weight"));
  const torch::Tensor s = m.moe_score == MoeScore::Softmax ? z.softmax(-1) : torch::sigmoid(z);
  const torch::Tensor choice = std::get<1>(s.detach().topk(k, -1));  // random scores: no ties
  const auto c = choice.accessor<int64_t, 2>();
  const int64_t capacity = m.moe_capacity_factor > 0
      ? static_cast<int64_t>(std::ceil(m.moe_capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(experts)))
      : tokens * k;
  std::vector<int64_t> taken(static_cast<size_t>(experts), 0), chosen_count(static_cast<size_t>(experts), 0);
  std::vector<std::vector<bool>> kept(static_cast<size_t>(tokens), std::vector<bool>(static_cast<size_t>(k)));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < tokens; ++t) {
      const auto e = static_cast<size_t>(c[t][j]);
      ++chosen_count[e];
      kept[static_cast<size_t>(t)][static_cast<size_t>(j)] = taken[e] < capacity;
      if (taken[e] < capacity) ++taken[e];
    }
  const torch::Tensor chosen = s.gather(1, choice), weight = chosen / chosen.sum(1, true);
  const torch::Tensor gate_up = w.at(p + ".experts.gate_up.weight"), down = w.at(p + ".experts.down.weight");
  const int64_t hidden = down.size(2);
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < tokens; ++t) {
    torch::Tensor y = torch::zeros({d}, h.options());
    for (int64_t j = 0; j < k; ++j) {
      if (!kept[static_cast<size_t>(t)][static_cast<size_t>(j)]) continue;
      const torch::Tensor gu = gate_up[c[t][j]];
      const torch::Tensor gate = torch::mv(gu.narrow(0, 0, hidden), h[t]), up = torch::mv(gu.narrow(0, hidden, hidden), h[t]);
      y = y + weight[t][j] * torch::mv(down[c[t][j]], gate * torch::sigmoid(gate) * up);
    }
    rows.push_back(y);
  }
  torch::Tensor out = x + torch::stack(rows).view(x.sizes());
  if (m.moe_shared_experts > 0) {
    const torch::Tensor gu = w.at(p + ".shared.gate_up.weight");  // [2, width, d]: gate then up
    const torch::Tensor gate = affine(h, gu[0]), up = affine(h, gu[1]);
    out = out + affine(gate * torch::sigmoid(gate) * up, w.at(p + ".shared.down.weight")).view(x.sizes());
  }
  const torch::Tensor f = torch::tensor(chosen_count, torch::kLong).to(torch::kDouble) / static_cast<double>(tokens * k);
  aux = aux + static_cast<double>(experts) * (f * (s / s.sum(1, true)).mean(0)).sum();
  return out;
}

// `aux` (one micro-batch's model only): the blocks' balance losses are added to it.
torch::Tensor llama_logits(const Weights& w, const Batch& batch, const ModelConfig& m, torch::Tensor* aux = nullptr) {
  const int64_t b = batch.tokens.size(0), t = batch.tokens.size(1);
  const torch::Tensor table = w.at("embedding.wte");
  torch::Tensor x = table.index_select(0, batch.tokens.reshape({-1})).view({b, t, m.d_model});
  for (int64_t i = 0; i < m.n_layers; ++i) {
    x = llama_attention(x, w, fmt::format("blocks.{}.attn", i), m);
    if (m.moe_experts > 0 && (i + 1) % m.moe_every == 0) x = llama_experts(x, w, fmt::format("blocks.{}.moe", i), m, *aux);
    else x = llama_mlp(x, w, fmt::format("blocks.{}.mlp", i));
  }
  return affine(rms_norm(x, w.at("final_norm.weight")), m.tie_embeddings ? table : w.at("head.weight"));
}

torch::Tensor gpt_logits(const Weights& w, const Batch& batch, const ModelConfig& m) {
  const int64_t b = batch.tokens.size(0), t = batch.tokens.size(1);
  const torch::Tensor rows = w.at("embedding.wte").index_select(0, batch.tokens.reshape({-1}));
  torch::Tensor x = rows.view({b, t, m.d_model}) + w.at("embedding.wpe").narrow(0, 0, t);
  for (int64_t i = 0; i < m.n_layers; ++i) {
    x = attention_block(x, w, fmt::format("blocks.{}.attn", i), m.n_heads);
    x = mlp_block(x, w, fmt::format("blocks.{}.mlp", i));
  }
  return affine(layer_norm(x, w, "final_norm"), w.at("head.weight"));
}

torch::Tensor token_losses(const torch::Tensor& logits, const torch::Tensor& targets) {
  return logits.logsumexp(-1) - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
}

// The mean next-token cross-entropy over every token of the global batch (`loss`), and what the
// step minimises (`objective`): with experts, plus the balance loss's coefficient times its mean
// over the micro-batches of `micro_batch` sequences (each routed on its own).
struct ReferenceLoss {
  torch::Tensor loss, objective;
};

ReferenceLoss reference_loss(const Weights& w, const Batch& batch, const ModelConfig& m, int64_t micro_batch) {
  if (m.moe_experts == 0) {
    const torch::Tensor logits = m.kind == "llama" ? llama_logits(w, batch, m) : gpt_logits(w, batch, m);
    const torch::Tensor loss = token_losses(logits, batch.targets).mean();
    return {loss, loss};
  }
  const int64_t n = batch.tokens.size(0) / micro_batch;
  torch::Tensor sum = torch::zeros({}, torch::kDouble), aux = torch::zeros({}, torch::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    const Batch mb{batch.tokens.narrow(0, i * micro_batch, micro_batch), batch.targets.narrow(0, i * micro_batch, micro_batch)};
    sum = sum + token_losses(llama_logits(w, mb, m, &aux), mb.targets).sum();
  }
  const torch::Tensor loss = sum / static_cast<double>(batch.tokens.numel());
  return {loss, loss + m.moe_aux_loss_coef * aux / static_cast<double>(n)};
}

struct ReferenceGradients {
  double loss = 0;
  Weights grads;
};

// Loss and gradients at `values`. Every parameter must receive a gradient: one the reference
// never reads would mean loom trains something this reference does not describe.
ReferenceGradients reference_gradients(const Weights& values, const Batch& batch, const ModelConfig& m,
                                       int64_t micro_batch) {
  Weights leaves;
  for (const auto& [name, v] : values) leaves[name] = v.detach().clone().requires_grad_(true);
  const ReferenceLoss loss = reference_loss(leaves, batch, m, micro_batch);
  loss.objective.backward();
  ReferenceGradients r{.loss = loss.loss.item<double>()};
  for (const auto& [name, leaf] : leaves) {
    EXPECT_TRUE(leaf.grad().defined()) << name << " takes no part in the reference model";
    r.grads[name] = leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf);
  }
  return r;
}

// ---- The reference optimizer's choices for GPT and Llama. ----

// GPT-2's choice, decided here by name: the matrices (token and position tables, the linears'
// weights, the head) decay; biases and norm gains (LayerNorm's, RMSNorm's) do not.
bool reference_decays(const std::string& name) {
  if (name == "embedding.wte" || name == "embedding.wpe" || name == "head.weight") return true;
  return name.ends_with(".weight") && name.find("norm") == std::string::npos;
}

void expect_same_decay_set(const LoomRun& loom) {
  for (const auto& [name, decays] : loom.decays)
    EXPECT_EQ(decays, reference_decays(name)) << name << ": loom's weight_decay flag differs from the reference's";
}

TEST(ReferenceStep, OneStepMatchesLossGradientsAndAdamW) {
  const Config c = reference_config(/*clip=*/0, /*steps=*/1, /*warmup=*/4);  // lr of step 0: lr / 4
  const LoomRun loom = run_loom(c);
  ASSERT_EQ(loom.records.size(), 1u);
  expect_same_decay_set(loom);
  const ReferenceGradients ref = reference_gradients(loom.initial, global_batch(c, 0), c.model, c.train.micro_batch);
  const double lr = reference_lr(c.train, 0);
  EXPECT_DOUBLE_EQ(loom.records[0].lr, lr);
  expect_norm_near(loom.records[0].grad_norm, global_norm(ref.grads));
  // From zero moments the first update is close to lr * sign(g): this checks the lr, the decay
  // set, the bias corrections and eps; the gradients themselves are checked directly below.
  Weights want = loom.initial;
  ReferenceAdamW(c.train.weight_decay, reference_decays).step(want, ref.grads, lr);
  const double loss = expect_loss_near(loom.records[0].loss, ref.loss, 0);
  const double grads = expect_all_near("gradient", loom.grads, ref.grads);
  const double weights = expect_all_near("updated value", loom.values, want);
  log_errors("one step", loss, grads, weights);
}

TEST(ReferenceStep, ClippedStepMatchesClippedAdamW) {
  const Config c = reference_config(/*clip=*/0.01, /*steps=*/1, /*warmup=*/4);
  const LoomRun loom = run_loom(c);
  ASSERT_EQ(loom.records.size(), 1u);
  const ReferenceGradients ref = reference_gradients(loom.initial, global_batch(c, 0), c.model, c.train.micro_batch);
  const double norm = global_norm(ref.grads);
  ASSERT_GT(norm, 10 * c.train.clip) << "the case must clip, and by a clear factor";
  expect_norm_near(loom.records[0].grad_norm, norm);  // reported before clipping
  const Weights grads_clipped = clipped(ref.grads, c.train.clip);
  Weights want = loom.initial;
  ReferenceAdamW(c.train.weight_decay, reference_decays).step(want, grads_clipped, reference_lr(c.train, 0));
  const double loss = expect_loss_near(loom.records[0].loss, ref.loss, 0);
  // Clipping scales Param::grad in place, so loom's gradients are the clipped ones.
  const double grads = expect_all_near("clipped gradient", loom.grads, grads_clipped);
  const double weights = expect_all_near("updated value", loom.values, want);
  log_errors("clipped step", loss, grads, weights);
}

// Step 2 starts from non-zero biases and non-unit gains and from AdamW moments of step 1; its
// lr is the cosine schedule's last (peak * min_lr_ratio with warmup 0 and two steps).
TEST(ReferenceStep, TwoStepsCarryTheOptimizerState) {
  const Config c = reference_config(/*clip=*/0, /*steps=*/2, /*warmup=*/0);
  const LoomRun loom = run_loom(c);
  ASSERT_EQ(loom.records.size(), 2u);
  Weights want = loom.initial;
  ReferenceAdamW adamw(c.train.weight_decay, reference_decays);
  double loss = 0;
  ReferenceGradients ref;
  for (int64_t step = 0; step < 2; ++step) {
    ref = reference_gradients(want, global_batch(c, step), c.model, c.train.micro_batch);
    const double lr = reference_lr(c.train, step);
    EXPECT_DOUBLE_EQ(loom.records[static_cast<size_t>(step)].lr, lr) << "step " << step + 1;
    loss = std::max(loss, expect_loss_near(loom.records[static_cast<size_t>(step)].loss, ref.loss, step));
    adamw.step(want, ref.grads, lr);
  }
  const double grads = expect_all_near("gradient of step 2", loom.grads, ref.grads);
  const double weights = expect_all_near("value after step 2", loom.values, want);
  log_errors("two steps", loss, grads, weights);
}

// The Llama: 4 query heads sharing 2 kv heads, a non-default rotary base, SwiGLU of hidden 96
// (2/3 x 4 x 32 = 85 rounded up to 16), no biases; its head separate or tied to the token table.
Config llama_reference_config(bool tied) {
  Config c = reference_config(/*clip=*/0, /*steps=*/1, /*warmup=*/4);
  c.model.kind = "llama";
  c.model.n_kv_heads = 2;
  c.model.rope_theta = 500.0;
  c.model.ffn_multiple_of = 16;
  c.model.tie_embeddings = tied;
  return c;
}

// loom's first step of `c` against the reference's: the decay set, the gradient norm, the loss,
// every gradient and the AdamW update.
void expect_first_step_matches(const Config& c, const LoomRun& loom, const std::string& test) {
  expect_same_decay_set(loom);
  const ReferenceGradients ref = reference_gradients(loom.initial, global_batch(c, 0), c.model, c.train.micro_batch);
  const double lr = reference_lr(c.train, 0);
  expect_norm_near(loom.records[0].grad_norm, global_norm(ref.grads));
  Weights want = loom.initial;
  ReferenceAdamW(c.train.weight_decay, reference_decays).step(want, ref.grads, lr);
  const double loss = expect_loss_near(loom.records[0].loss, ref.loss, 0);
  const double grads = expect_all_near("gradient", loom.grads, ref.grads);
  const double weights = expect_all_near("updated value", loom.values, want);
  log_errors(test, loss, grads, weights);
}

class ReferenceLlamaStep : public ::testing::TestWithParam<bool> {};  // tied

TEST_P(ReferenceLlamaStep, OneStepMatchesLossGradientsAndAdamW) {
  const Config c = llama_reference_config(GetParam());
  const LoomRun loom = run_loom(c);
  ASSERT_EQ(loom.records.size(), 1u);
  EXPECT_EQ(loom.initial.count("head.weight"), GetParam() ? 0u : 1u) << "a tied head has no matrix of its own";
  expect_first_step_matches(c, loom, GetParam() ? "llama, tied head" : "llama");
}

INSTANTIATE_TEST_SUITE_P(Head, ReferenceLlamaStep, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Tied" : "Untied"; });

// The Llama with experts in block 1 (of 2): 4 experts of width 24, top 2, the balance loss at a
// weight that shows, two micro-batches each routed on its own (NOTE [Mixture-of-experts block]).
// Dropless with softmax scores; a capacity that drops with sigmoid scores and a shared expert.
struct ExpertsCase {
  const char* name;
  MoeScore score;
  double capacity_factor;
  int64_t shared;
};

class ReferenceExpertsStep : public ::testing::TestWithParam<ExpertsCase> {};

TEST_P(ReferenceExpertsStep, OneStepMatchesLossGradientsAndAdamW) {
  Config c = llama_reference_config(false);
  c.model.moe_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_every = 2;
  c.model.moe_ffn_hidden = 24;
  c.model.moe_aux_loss_coef = 0.1;
  c.model.moe_score = GetParam().score;
  c.model.moe_capacity_factor = GetParam().capacity_factor;
  c.model.moe_shared_experts = GetParam().shared;
  const LoomRun loom = run_loom(c);
  ASSERT_EQ(loom.records.size(), 1u);
  ASSERT_EQ(loom.records[0].experts.size(), 1u);
  EXPECT_EQ(loom.records[0].experts[0].dropped > 0, GetParam().capacity_factor > 0);
  EXPECT_EQ(loom.initial.count("blocks.1.mlp.gate_up.weight"), 0u) << "block 1's MLP is its experts";
  expect_first_step_matches(c, loom, fmt::format("llama, experts {}", GetParam().name));
}

INSTANTIATE_TEST_SUITE_P(Routing, ReferenceExpertsStep,
                         ::testing::Values(ExpertsCase{"Dropless", MoeScore::Softmax, 0.0, 0},
                                           ExpertsCase{"CapacitySigmoidShared", MoeScore::Sigmoid, 0.75, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::train

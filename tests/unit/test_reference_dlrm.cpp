// An independent reference for a whole training step of the DLRM (models/dlrm.h), as
// test_reference_step.cpp is for the GPT and the Llama: the model written once more with plain
// libtorch autograd ops over the whole global batch at once (loom runs micro-batches and
// accumulates), the embedding bags as index_select and sum, the loss as PyTorch's
// binary_cross_entropy_with_logits averaged over the batch (loom writes the stable form out and
// scales each micro-batch), and clipping and AdamW from their formulas (unit/reference_step.h).
// The samples are the click source's, read as one micro-batch holding the whole global batch.
//
// In float64 (relative 1e-9), for the serial Trainer with its tables dense: two steps' losses,
// the second step's gradients (clipped) and the weights after it, so the moments, the bias
// corrections and the decay set (the linears' weights and the click weight, no table, no bias)
// are all checked.
#include <gtest/gtest.h>

#include "loom/data/clicks.h"
#include "loom/dist/null_communicator.h"
#include "loom/train/trainer.h"
#include "tiny_configs.h"
#include "unit/reference_step.h"

namespace loom::train {
namespace {

using namespace reference;  // NOLINT: the shared reference pieces (unit/reference_step.h)
using test::small_dlrm;

// The tables' path is "off" (small_dlrm): their gradients are dense and live in Param::grad.
Config dlrm_reference_config() {
  Config c = small_dlrm(/*global_batch=*/8, /*micro_batch=*/2);  // four micro-batches: gradient accumulation
  c.model.table_rows = 50;
  c.model.bag_size = 3;
  c.model.top_mlp = {12, 6};
  c.train.steps = 2;
  c.train.weight_decay = 0.1;
  c.train.beta1 = kBeta1;
  c.train.beta2 = kBeta2;
  c.train.clip = 0.5;
  return c;
}

// The linears' weights and the click weight decay; tables and biases do not.
bool dlrm_decays(const std::string& name) {
  return name.ends_with(".weight") && !name.starts_with("bags.");
}

// relu(x W^T + b) through the linears PREFIX.0 .. PREFIX.(layers - 1), in order.
torch::Tensor mlp(torch::Tensor x, const Weights& w, const std::string& prefix, size_t layers) {
  for (size_t i = 0; i < layers; ++i) {
    const std::string name = fmt::format("{}.{}", prefix, i);
    x = torch::relu(torch::matmul(x, w.at(name + ".weight").t()) + w.at(name + ".bias"));
  }
  return x;
}

// The loss of the global batch of `step` and every parameter's gradient, from `values`.
std::pair<double, Weights> reference_gradients(const Weights& values, const Config& c, int64_t step) {
  const data::ClickSource source(c.model, c.data.zipf, static_cast<uint64_t>(c.train.seed));
  const int64_t n = c.train.global_batch;
  const nn::MicroBatch all = source.microbatch(n, n, step, 0);  // samples [step n, (step + 1) n), in order
  Weights leaves;
  for (const auto& [name, v] : values) leaves[name] = v.detach().clone().requires_grad_(true);
  torch::Tensor x = mlp(all.dense, leaves, "bottom", c.model.bottom_mlp.size() + 1);
  std::vector<torch::Tensor> parts{x};
  const int64_t bag = c.model.bag_size, width = c.model.d_model;
  for (int64_t f = 0; f < c.model.tables; ++f) {
    const torch::Tensor ids = all.tokens.narrow(1, f * bag, bag).reshape({-1});
    const torch::Tensor& table = leaves.at(fmt::format("bags.{}.weight", f));
    parts.push_back(table.index_select(0, ids).view({n, bag, width}).sum(1));
  }
  x = mlp(torch::cat(parts, 1), leaves, "top", c.model.top_mlp.size());
  const torch::Tensor logit = (torch::matmul(x, leaves.at("click.weight").t()) + leaves.at("click.bias")).squeeze(1);
  const torch::Tensor loss =
      torch::binary_cross_entropy_with_logits(logit, all.targets.reshape({-1}).to(logit.scalar_type()));
  loss.backward();
  Weights grads;
  for (const auto& [name, leaf] : leaves) {
    EXPECT_TRUE(leaf.grad().defined()) << name << " takes no part in the reference model";
    grads[name] = leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf);
  }
  return {loss.item<double>(), grads};
}

TEST(ReferenceDlrmStep, TwoClippedStepsMatchLossesGradientsAndAdamW) {
  const Config c = dlrm_reference_config();
  dist::NullCommunicator world;
  Trainer trainer(c, world);
  Weights want;
  for (nn::Param* p : trainer.model().params()) {
    want[p->name] = trainer.value_of(*p).clone();
    EXPECT_EQ(p->weight_decay, dlrm_decays(p->name)) << p->name << ": loom's weight_decay flag differs";
  }
  const std::vector<StepRecord> records = trainer.run({.peak_flops = 1e9});
  ASSERT_EQ(records.size(), 2u);

  ReferenceAdamW adamw(c.train.weight_decay, dlrm_decays);
  double loss_error = 0;
  Weights last_clipped;
  for (int64_t step = 0; step < 2; ++step) {
    const auto [loss, grads] = reference_gradients(want, c, step);
    loss_error = std::max(loss_error, expect_loss_near(records[static_cast<size_t>(step)].loss, loss, step));
    expect_norm_near(records[static_cast<size_t>(step)].grad_norm, global_norm(grads));  // before clipping
    EXPECT_GT(global_norm(grads), c.train.clip) << "step " << step + 1 << ": clipping is not active";
    EXPECT_DOUBLE_EQ(records[static_cast<size_t>(step)].lr, reference_lr(c.train, step));
    last_clipped = clipped(grads, c.train.clip);
    adamw.step(want, last_clipped, reference_lr(c.train, step));
  }
  Weights got_grads, got_values;
  for (nn::Param* p : trainer.model().params()) {
    got_grads[p->name] = p->grad.clone();
    got_values[p->name] = trainer.value_of(*p).clone();
  }
  const double grads = expect_all_near("clipped gradient of step 2", got_grads, last_clipped);
  const double weights = expect_all_near("value after step 2", got_values, want);
  log_errors("dlrm, two clipped steps", loss_error, grads, weights);
}

}  // namespace
}  // namespace loom::train

// AdamW against libtorch's AdamW, the LR schedule's shape, and global-norm clipping.
#include <cmath>

#include "loom/dist/null_communicator.h"
#include "loom/optim/adamw.h"
#include "loom/optim/clip.h"
#include "loom/optim/lr_schedule.h"
#include "unit/layer_check.h"

namespace loom::optim {
namespace {

TEST(AdamW, MatchesLibtorchAdamWOverStepsWithChangingLr) {
  torch::manual_seed(5);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  std::vector<nn::Param> params(2);
  params[0] = {.name = "w", .full_shape = {4, 3}, .weight_decay = true};
  params[1] = {.name = "b", .full_shape = {3}, .weight_decay = true};
  std::vector<torch::Tensor> ref;
  for (auto& p : params) {
    p.value = at::randn(p.full_shape, opts);
    p.grad = at::zeros_like(p.value);
    ref.push_back(p.value.clone().requires_grad_(true));
  }
  AdamW ours({&params[0], &params[1]}, {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  torch::optim::AdamW theirs(ref, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  for (int step = 0; step < 6; ++step) {
    const double lr = 1e-2 * (step + 1) / 6.0;
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = at::randn(params[i].full_shape, opts);
      params[i].grad.copy_(g);
      ref[i].mutable_grad() = g.clone();
    }
    static_cast<torch::optim::AdamWOptions&>(theirs.param_groups()[0].options()).lr(lr);
    ours.step(lr);
    theirs.step();
    SCOPED_TRACE(step);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TENSOR_NEAR(params[i].value, ref[i].detach(), 1e-12);
  }
  EXPECT_EQ(ours.step_count(), 6);
}

TEST(AdamW, SkipsDecayForParamsWithoutIt) {
  nn::Param p{.name = "norm.bias", .full_shape = {3}, .weight_decay = false};
  p.value = at::ones({3}, at::kDouble);
  p.grad = at::zeros({3}, at::kDouble);
  AdamW opt({&p}, {.weight_decay = 0.5});
  opt.step(0.1);  // zero gradient: only decay could move it
  EXPECT_TRUE(at::equal(p.value, at::ones({3}, at::kDouble)));
}

// A GPU's AdamW (whole-tensor kernels, NOTE [Devices]) makes the host loop's update: the same
// operations in the same order, so float64 agrees to the last bits over steps with decay.
TEST(AdamW, KernelFormGivesTheLoopsValues) {
  at::manual_seed(3);
  const AdamWOptions options{.weight_decay = 0.1};
  at::Tensor p_loop = at::randn({257}, at::kDouble), m_loop = at::zeros_like(p_loop), v_loop = at::zeros_like(p_loop);
  at::Tensor p_kern = p_loop.clone(), m_kern = m_loop.clone(), v_kern = v_loop.clone();
  const at::Tensor initial = p_loop.clone();
  for (int64_t step = 1; step <= 4; ++step) {
    const at::Tensor g = at::randn({257}, at::kDouble);
    const double lr = 1e-2 / static_cast<double>(step), decay = 1.0 - lr * options.weight_decay;
    adamw_update(p_loop, g, m_loop, v_loop, lr, decay, step, options);
    adamw_update_by_kernels(p_kern, g, m_kern, v_kern, lr, decay, step, options);
  }
  EXPECT_TENSOR_NEAR(m_kern, m_loop, 1e-15);
  EXPECT_TENSOR_NEAR(v_kern, v_loop, 1e-15);
  EXPECT_TENSOR_NEAR(p_kern, p_loop, 1e-15);
  EXPECT_GT((p_loop - initial).abs().max().item<double>(), 1e-4);  // the updates moved it
}

TEST(LrSchedule, WarmsUpLinearlyThenDecaysByCosineToTheFloor) {
  const LrSchedule s{.peak = 1.0, .min_ratio = 0.1, .warmup = 4, .total_steps = 20};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_NEAR(s.at(19), 0.1, 1e-12);
  for (int64_t i = 5; i < 20; ++i) EXPECT_LT(s.at(i), s.at(i - 1)) << i;
  const LrSchedule no_warmup{.peak = 2.0, .min_ratio = 0.0, .warmup = 0, .total_steps = 3};
  EXPECT_DOUBLE_EQ(no_warmup.at(0), 2.0);
  EXPECT_NEAR(no_warmup.at(2), 0.0, 1e-12);
}

TEST(Clip, ScalesAllGradientsToTheGlobalNorm) {
  nn::Param a{.name = "a"}, b{.name = "b"};
  a.grad = at::full({4}, 3.0, at::kDouble);  // norm 6
  b.grad = at::full({1}, 8.0, at::kDouble);  // norm 8 -> global 10
  dist::NullCommunicator tp;
  EXPECT_DOUBLE_EQ(clip_grad_norm({&a, &b}, 20.0, tp), 10.0);  // under the limit: untouched
  EXPECT_DOUBLE_EQ(a.grad[0].item<double>(), 3.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm({&a, &b}, 5.0, tp), 10.0);
  EXPECT_NEAR(global_grad_norm({&a, &b}, tp), 5.0, 1e-6);
  EXPECT_NEAR(a.grad[0].item<double>() / b.grad[0].item<double>(), 3.0 / 8.0, 1e-15);
}

}  // namespace
}  // namespace loom::optim

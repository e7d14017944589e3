#pragma once
// Checks a layer's explicit forward / split backward against libtorch autograd on the same math.
// The reference gets leaf copies of the layer's parameters (in params() order); both sides see
// the same input and the same upstream gradient dy.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "loom/nn/layer.h"

namespace loom::test {

// ||a - b|| / ||b||: a relative error that is meaningful for whole tensors. The floor of 1e-6 on
// the denominator only matters for references that are (nearly) all zero, where a relative
// error is undefined.
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>();
  const double ref = b.to(at::kDouble).norm().item<double>();
  return diff / std::max(ref, 1e-6);
}

inline double tolerance(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-9 : 2e-5; }

#define EXPECT_TENSOR_NEAR(got, want, tol)                                                 \
  do {                                                                                     \
    ASSERT_EQ((got).sizes(), (want).sizes());                                              \
    EXPECT_LE(::loom::test::relative_error((got), (want)), (tol)) << #got " vs " #want;    \
  } while (false)

using Reference = std::function<torch::Tensor(const torch::Tensor& x, const std::vector<torch::Tensor>& params)>;

// Runs layer.forward / backward_input(dy) / backward_weight and the autograd reference, and
// compares y, dx (if x is floating point) and every parameter gradient.
inline void check_layer_against_autograd(nn::Layer& layer, const at::Tensor& x, const nn::MicroBatch& mb,
                                         const Reference& reference, const at::Tensor& dy) {
  const double tol = tolerance(layer.params().front()->value.scalar_type());
  for (nn::Param* p : layer.params()) p->grad.zero_();
  nn::Saved saved;
  const at::Tensor y = layer.forward(x, mb, saved);
  const at::Tensor dx = layer.backward_input(dy, saved);
  layer.backward_weight(saved);
  EXPECT_TRUE(saved.empty()) << "backward_weight must release what the layer saved";

  torch::Tensor x_ref = x.detach().clone();
  const bool float_input = x.is_floating_point();
  if (float_input) x_ref.requires_grad_(true);
  std::vector<torch::Tensor> leaves;
  for (nn::Param* p : layer.params()) leaves.push_back(p->value.detach().clone().requires_grad_(true));
  const torch::Tensor y_ref = reference(x_ref, leaves);
  if (dy.defined()) y_ref.backward(dy);
  else y_ref.backward();

  EXPECT_TENSOR_NEAR(y, y_ref.detach(), tol);
  if (float_input) EXPECT_TENSOR_NEAR(dx, x_ref.grad(), tol);
  const auto params = layer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(params[i]->name);
    EXPECT_TENSOR_NEAR(params[i]->grad, leaves[i].grad(), tol);
  }
}

}  // namespace loom::test

#pragma once
// Checks a layer's explicit forward / split backward against libtorch autograd on the same math.
// The reference gets leaf copies of the layer's parameters (in params() order); both sides see
// the same input and the same upstream gradient dy.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "loom/nn/gradient_check.h"
#include "loom/nn/layer.h"

namespace loom::test {

// ||a - b|| / ||b||: a relative error that is meaningful for whole tensors (nn/gradient_check.h).
using nn::relative_error;

inline double tolerance(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-9 : 2e-5; }

#define EXPECT_TENSOR_NEAR(got, want, tol)                                                 \
  do {                                                                                     \
    ASSERT_EQ((got).sizes(), (want).sizes());                                              \
    EXPECT_LE(::loom::test::relative_error((got), (want)), (tol)) << #got " vs " #want;    \
  } while (false)

using Reference = nn::AutogradReference;

// Runs layer.forward / backward_input(dy) / backward_weight and the autograd reference, and
// compares y, dx (if x is floating point) and every parameter gradient (NOTE [Gradient check]).
inline void check_layer_against_autograd(nn::Layer& layer, const at::Tensor& x, const nn::MicroBatch& mb,
                                         const Reference& reference, const at::Tensor& dy) {
  const double tol = tolerance(layer.params().front()->value.scalar_type());
  const nn::GradientCheck check = nn::check_gradients(layer, x, mb, reference, dy);
  EXPECT_TRUE(check.released) << "backward_weight must release what the layer saved";
  EXPECT_TRUE(check.problems.empty()) << check.describe();
  EXPECT_LE(check.worst(), tol) << check.describe();
}

// Parameters get random values (not their GPT init) so that a gain of one or a bias of zero
// cannot hide a missing term.
inline void randomise(nn::Layer& layer, at::ScalarType dtype) {
  for (nn::Param* p : layer.params()) {
    nn::initialise(*p, 7, dtype);
    p->value = at::randn(p->value.sizes(), p->value.options()) * 0.5;
  }
}

inline torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& gain) {
  return x * (x.pow(2).mean(-1, /*keepdim=*/true) + 1e-5).rsqrt() * gain;
}

}  // namespace loom::test

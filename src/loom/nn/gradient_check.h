#pragma once
// NOTE [Gradient check]
// A layer's explicit forward and split backward against libtorch autograd on the same math: the
// check every layer of loom passes in its unit tests, and the one a layer of one's own should
// pass before it trains (docs/cpp-api.md). The reference computes the layer's output from leaf
// copies of its parameters (in params() order) with ordinary tensor operations; autograd then
// differentiates it. Both sides see the same input x and the same upstream gradient dy (undefined
// for a layer that returns a loss: its output is a 0-d tensor). Run it in float64, where a correct
// layer agrees to about 1e-12 and a wrong one shows at once.
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "loom/nn/layer.h"

namespace loom::nn {

// ||a - b|| / max(||b||, 1e-6): a relative error meaningful for whole tensors (the floor only
// matters for a reference that is all but zero). Infinity for tensors of different shapes.
double relative_error(const at::Tensor& a, const at::Tensor& b);

// The reference: the layer's output for input x and parameter values `params` (leaves that
// require gradients), built from differentiable tensor operations.
using AutogradReference = std::function<at::Tensor(const at::Tensor& x, const std::vector<at::Tensor>& params)>;

struct GradientCheck {
  std::string layer;                // its name()
  double output = 0;                // y against the reference's
  double input = 0;                 // dx against autograd's (0 when x is not floating point)
  std::vector<std::pair<std::string, double>> params;  // each parameter's gradient, by name
  bool released = true;             // backward_weight left nothing saved
  std::vector<std::string> problems;  // shape mismatches and the like, each a sentence

  double worst() const;  // the largest of the errors (infinity after a problem)
  bool passed(double tolerance) const { return problems.empty() && released && worst() <= tolerance; }
  std::string describe() const;  // one line per figure, for a test's or a program's output
};

// Runs layer.forward(x) / backward_input(dy) / backward_weight() once (the parameters' gradients
// are zeroed first and hold the layer's own afterwards) and the reference under autograd.
// Parameters on the sparse path (Param::sparse) are not supported: check a table densely.
GradientCheck check_gradients(Layer& layer, const at::Tensor& x, const MicroBatch& mb,
                              const AutogradReference& reference, const at::Tensor& dy);

}  // namespace loom::nn

#pragma once
// y = x W^T + b over the last dim. A building block of layers, not a chain layer itself: the
// layer that owns it decides what to keep for the weight gradient (the input x and dy).
#include "loom/nn/param.h"

namespace loom::nn {

class Linear {
 public:
  Linear(const std::string& name, int64_t in_features, int64_t out_features, bool bias, double init_std);

  at::Tensor forward(const at::Tensor& x) const;            // [..., in] -> [..., out]
  at::Tensor backward_input(const at::Tensor& dy) const;    // [..., out] -> [..., in]
  void backward_weight(const at::Tensor& x, const at::Tensor& dy);  // grads += dy^T x, sum(dy)
  std::vector<Param*> params();
  double flops(int64_t rows) const { return 2.0 * static_cast<double>(rows * in_ * out_); }

  Param weight;  // [out, in]
  Param bias;    // [out], empty name when the layer has no bias

 private:
  int64_t in_, out_;
};

}  // namespace loom::nn

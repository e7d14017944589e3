#pragma once
// RMSNorm over the last dim with a gain and no bias (eps 1e-5): y = x / rms(x) * gain, where
// rms(x) = sqrt(mean(x^2) + eps). A building block like LayerNorm: forward returns the statistic
// backward needs (rstd = 1 / rms, shape [..., 1]) and the owner keeps it; backward gives the
// input gradient and the [dim] gain gradient in one pass, and `accumulate` adds the latter to
// the gain's gradient in the owner's backward_weight. The statistic is computed in the input's
// dtype, so a float64 model stays float64 throughout; bfloat16 inputs are widened to float32
// (NOTE [Mixed precision]).
#include "loom/nn/param.h"

namespace loom::nn {

struct RmsNormOutput {
  at::Tensor y, rstd;  // rstd [..., 1]
};

struct RmsNormGrads {
  at::Tensor dx, dgain;
};

class RmsNorm {
 public:
  // `sequence_sharded`: it sees only this tp rank's tokens (tp_sequence), so its gain gradient
  // is partial over tp (NOTE [Parameter placements]).
  RmsNorm(const std::string& name, int64_t dim, bool sequence_sharded = false);

  RmsNormOutput forward(const at::Tensor& x) const;
  RmsNormGrads backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd) const;
  void accumulate(const RmsNormGrads& grads);  // gain.grad += dgain
  std::vector<Param*> params() { return {&gain}; }

  Param gain;  // [dim], starts at 1

 private:
  int64_t dim_;
};

}  // namespace loom::nn

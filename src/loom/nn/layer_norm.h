#pragma once
// LayerNorm over the last dim with gain and bias (eps 1e-5). A building block: forward returns
// the statistics backward needs, and the owner keeps them. Backward produces the input gradient
// and the (small, [dim]) gain and bias gradients in one pass; the owner calls it in its
// backward_input and hands the parameter gradients to `accumulate` in its backward_weight, so
// the split stays exact while the activation pass over x and dy runs once.
#include "loom/nn/param.h"

namespace loom::nn {

struct NormOutput {
  at::Tensor y, mean, rstd;
};

struct NormGrads {
  at::Tensor dx, dgain, dbias;
};

class LayerNorm {
 public:
  // `sequence_sharded`: it sees only this tp rank's tokens (tp_sequence), so its parameter
  // gradients are partial over tp (NOTE [Parameter placements]).
  LayerNorm(const std::string& name, int64_t dim, bool sequence_sharded = false);

  NormOutput forward(const at::Tensor& x) const;
  NormGrads backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                     const at::Tensor& rstd) const;
  void accumulate(const NormGrads& grads);  // gain.grad += dgain, bias.grad += dbias
  std::vector<Param*> params() { return {&gain, &bias}; }

  Param gain;  // [dim], starts at 1
  Param bias;  // [dim], starts at 0

 private:
  int64_t dim_;
};

}  // namespace loom::nn

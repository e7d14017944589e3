#pragma once
// LayerNorm over the last dim with gain and bias (eps 1e-5). A building block: forward returns
// the statistics that both halves of backward need, and the owner keeps them.
#include "loom/nn/param.h"

namespace loom::nn {

struct NormOutput {
  at::Tensor y, mean, rstd;
};

class LayerNorm {
 public:
  LayerNorm(const std::string& name, int64_t dim);

  NormOutput forward(const at::Tensor& x) const;
  at::Tensor backward_input(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                            const at::Tensor& rstd) const;
  void backward_weight(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                       const at::Tensor& rstd);
  std::vector<Param*> params() { return {&gain, &bias}; }

  Param gain;  // [dim], starts at 1
  Param bias;  // [dim], starts at 0

 private:
  int64_t dim_;
};

}  // namespace loom::nn

#pragma once
// AdamW with decoupled weight decay (the update libtorch's and PyTorch's AdamW make):
//   p -= lr * wd * p                      (only for params with weight_decay set)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <vector>

#include "loom/nn/param.h"

namespace loom::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// One AdamW update of contiguous tensors of one shape, at step `step` (1-based, for the bias
// corrections), with the parameter's decay factor 1 - lr * weight_decay (1 = no decay).
// AdamW::step and the lazy update of sparse tables' touched rows (parallel/sparse_table.h) both
// run it, so a row updates the same way on either path.
void adamw_update(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, double lr, double decay,
                  int64_t step, const AdamWOptions& options);

class AdamW {
 public:
  AdamW(std::vector<nn::Param*> params, AdamWOptions options);
  void step(double lr);  // uses each Param::grad as it is (clip before)
  int64_t step_count() const { return step_; }

 private:
  struct State {
    at::Tensor m, v;
  };
  std::vector<nn::Param*> params_;
  std::vector<State> state_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace loom::optim

#include "loom/nn/linear.h"

namespace loom::nn {

Linear::Linear(const std::string& name, int64_t in_features, int64_t out_features, bool bias,
               double init_std)
    : in_(in_features), out_(out_features) {
  weight = Param{.name = name + ".weight", .full_shape = {out_features, in_features},
                 .init = Init::Normal, .init_std = init_std, .weight_decay = true};
  if (bias) this->bias = Param{.name = name + ".bias", .full_shape = {out_features}};
}

at::Tensor Linear::forward(const at::Tensor& x) const {
  return bias.name.empty() ? at::linear(x, weight.value) : at::linear(x, weight.value, bias.value);
}

at::Tensor Linear::backward_input(const at::Tensor& dy) const { return at::matmul(dy, weight.value); }

void Linear::backward_weight(const at::Tensor& x, const at::Tensor& dy) {
  const at::Tensor x2 = x.reshape({-1, in_});
  const at::Tensor dy2 = dy.reshape({-1, out_});
  weight.grad.addmm_(dy2.t(), x2);
  if (!bias.name.empty()) bias.grad.add_(dy2.sum(0));
}

std::vector<Param*> Linear::params() {
  if (bias.name.empty()) return {&weight};
  return {&weight, &bias};
}

}  // namespace loom::nn

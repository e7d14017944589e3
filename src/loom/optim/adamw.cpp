#include "loom/optim/adamw.h"

#include <cmath>

namespace loom::optim {

AdamW::AdamW(std::vector<nn::Param*> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  state_.reserve(params_.size());
  for (nn::Param* p : params_) state_.push_back({at::zeros_like(p->value), at::zeros_like(p->value)});
}

void AdamW::step(double lr) {
  ++step_;
  const double t = static_cast<double>(step_);
  const double correction1 = 1.0 - std::pow(options_.beta1, t);
  const double correction2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, t));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& value = params_[i]->value;
    const at::Tensor& grad = params_[i]->grad;
    auto& [m, v] = state_[i];
    if (params_[i]->weight_decay && options_.weight_decay != 0) value.mul_(1.0 - lr * options_.weight_decay);
    m.lerp_(grad, 1.0 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    const at::Tensor denom = (v.sqrt() / correction2_sqrt).add_(options_.eps);
    value.addcdiv_(m, denom, -lr / correction1);
  }
}

}  // namespace loom::optim

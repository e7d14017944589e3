#include "loom/optim/adamw.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>

namespace loom::optim {

AdamW::AdamW(std::vector<nn::Param*> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  state_.reserve(params_.size());
  for (nn::Param* p : params_) state_.push_back({at::zeros_like(p->value), at::zeros_like(p->value)});
}

namespace {

// One pass over a parameter: decay, both moments and the update, element by element (the
// unfused form is eight passes over memory). Same operation order as the formula in adamw.h.
template <class T>
void update_elements(T* p, const T* g, T* m, T* v, int64_t n, double lr, double decay_factor, double beta1,
                  double beta2, double step_size, double correction2_sqrt, double eps) {
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2), one = 1;
  const T decay = static_cast<T>(decay_factor), step = static_cast<T>(step_size);
  const T inv_c2 = static_cast<T>(1.0 / correction2_sqrt), e = static_cast<T>(eps);
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T grad = g[i];
      const T mi = m[i] + (grad - m[i]) * (one - b1);
      const T vi = v[i] * b2 + (one - b2) * grad * grad;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step * mi / (std::sqrt(vi) * inv_c2 + e);
    }
  });
}

}  // namespace

// The loop's operations in the same order, each one a kernel over the whole tensor.
void adamw_update_by_kernels(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, double lr,
                             double decay, int64_t step, const AdamWOptions& options) {
  const double t = static_cast<double>(step);
  const double step_size = lr / (1.0 - std::pow(options.beta1, t));
  const double correction2_sqrt = std::sqrt(1.0 - std::pow(options.beta2, t));
  m.add_((grad - m).mul_(1.0 - options.beta1));
  v.mul_(options.beta2).add_((grad * (1.0 - options.beta2)).mul_(grad));
  const at::Tensor denominator = v.sqrt().mul_(1.0 / correction2_sqrt).add_(options.eps);
  value.mul_(decay).sub_(m * step_size / denominator);
}

void adamw_update(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, double lr, double decay,
                  int64_t step, const AdamWOptions& options) {
  if (!value.is_cpu()) return adamw_update_by_kernels(value, grad, m, v, lr, decay, step, options);
  TORCH_CHECK(value.is_contiguous() && grad.is_contiguous() && m.is_contiguous() && v.is_contiguous(),
              "AdamW needs contiguous tensors");
  const double t = static_cast<double>(step);
  const double correction1 = 1.0 - std::pow(options.beta1, t);
  const double correction2_sqrt = std::sqrt(1.0 - std::pow(options.beta2, t));
  AT_DISPATCH_FLOATING_TYPES(value.scalar_type(), "adamw", [&] {
    update_elements<scalar_t>(value.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(),
                              v.data_ptr<scalar_t>(), value.numel(), lr, decay, options.beta1, options.beta2,
                              lr / correction1, correction2_sqrt, options.eps);
  });
}

void adamw_update_elements(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v,
                           const at::Tensor& index, double lr, double decay, int64_t step, const AdamWOptions& options) {
  if (index.numel() == 0) return;
  at::Tensor flat_value = value.view({-1}), flat_m = m.view({-1}), flat_v = v.view({-1});
  at::Tensor p = flat_value.index_select(0, index), mi = flat_m.index_select(0, index),
             vi = flat_v.index_select(0, index);
  const at::Tensor g = grad.reshape({-1}).index_select(0, index);
  adamw_update(p, g, mi, vi, lr, decay, step, options);
  flat_value.index_copy_(0, index, p);
  flat_m.index_copy_(0, index, mi);
  flat_v.index_copy_(0, index, vi);
}

void AdamW::step(double lr) {
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Param& param = *params_[i];
    auto& [m, v] = state_[i];
    const double decay = param.weight_decay ? 1.0 - lr * options_.weight_decay : 1.0;
    const at::Tensor lazy = options_.lazy_rows ? options_.lazy_rows->elements_of(param.value) : at::Tensor();
    if (lazy.defined())
      adamw_update_elements(param.value, param.grad, m, v, lazy, lr, decay, step_, options_);
    else
      adamw_update(param.value, param.grad, m, v, lr, decay, step_, options_);
  }
}

}  // namespace loom::optim

#include "loom/nn/precision.h"

namespace loom::nn {

at::ScalarType master_type(DType dtype) { return dtype == DType::Float64 ? at::kDouble : at::kFloat; }

at::ScalarType activation_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return at::kFloat;
    case DType::Float64: return at::kDouble;
    case DType::BFloat16: return at::kBFloat16;
  }
  return at::kFloat;
}

at::ScalarType wide_type(at::ScalarType t) { return t == at::kBFloat16 ? at::kFloat : t; }

at::Tensor widen(const at::Tensor& x) { return to_type(x, wide_type(x.scalar_type())); }

at::Tensor to_type(const at::Tensor& x, at::ScalarType type) { return x.scalar_type() == type ? x : x.to(type); }

const at::Tensor& compute_value(const Param& p) { return p.compute.defined() ? p.compute : p.value; }

void refresh_compute(Param& p, at::ScalarType activations) {
  if (!p.value.defined() || p.value.scalar_type() == activations) {
    p.compute.reset();
    return;
  }
  if (p.compute.defined() && p.compute.sizes() == p.value.sizes() && p.compute.scalar_type() == activations)
    p.compute.copy_(p.value);
  else
    p.compute = p.value.to(activations);
}

void add_product(const at::Tensor& acc, const at::Tensor& a, const at::Tensor& b, double alpha) {
  const bool batched = a.dim() == 3;
  if (acc.scalar_type() == a.scalar_type()) {
    if (batched) acc.baddbmm_(a, b, 1.0, alpha);
    else acc.addmm_(a, b, 1.0, alpha);
    return;
  }
  acc.add_(batched ? at::bmm(a, b) : at::mm(a, b), alpha);
}

void index_add_into(const at::Tensor& acc, int64_t dim, const at::Tensor& index, const at::Tensor& t) {
  acc.index_add_(dim, index, to_type(t, acc.scalar_type()));
}

at::Tensor sum_rows(const at::Tensor& t, at::ScalarType type) { return at::sum(t, {0}, false, type); }

}  // namespace loom::nn

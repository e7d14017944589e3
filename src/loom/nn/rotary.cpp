#include "loom/nn/rotary.h"

#include <cmath>
#include <vector>

#include "loom/core/error.h"
#include "loom/nn/precision.h"

namespace loom::nn {
namespace {

// Rotates each pair (i, i + hd/2) of x [..., T, hd] by +angle (sign = 1) or -angle (sign = -1):
//   out_lo = x_lo cos - sign x_hi sin,   out_hi = x_hi cos + sign x_lo sin,
// in the table's type (float32 for bfloat16 activations), returned in x's.
at::Tensor rotate(const at::Tensor& x, const RotaryTable& table, double sign) {
  const int64_t half = table.cos.size(-1);
  LOOM_CHECK(x.size(-1) == 2 * half, "rotary: head dim {} does not match the table's {}", x.size(-1), 2 * half);
  LOOM_CHECK(x.dim() >= 2 && x.size(-2) == table.cos.size(0), "rotary: {} tokens but the table has {} positions",
             x.dim() >= 2 ? x.size(-2) : 0, table.cos.size(0));
  const at::Tensor xt = to_type(x, table.cos.scalar_type());
  const at::Tensor lo = xt.narrow(-1, 0, half), hi = xt.narrow(-1, half, half);
  at::Tensor out = at::empty(xt.sizes(), xt.options());
  at::Tensor out_lo = out.narrow(-1, 0, half), out_hi = out.narrow(-1, half, half);
  at::mul_out(out_lo, lo, table.cos).addcmul_(hi, table.sin, -sign);
  at::mul_out(out_hi, hi, table.cos).addcmul_(lo, table.sin, sign);
  return to_type(out, x.scalar_type());
}

}  // namespace

// NOTE [Rotary tables]: the table is computed on the host, one element at a time, with std::cos
// and std::sin in float64, and only then cast and copied to x's dtype and device. Vectorised
// kernels would treat the last few elements of a buffer differently from the rest (a scalar
// tail), so the same position could get a value one ulp apart depending on where it falls in
// the tensor; element by element, a position's entries are the same in every layout and on every
// device. The table is [T, hd/2], built once per micro-batch, so its cost is small.
RotaryTable RotaryTable::build(const at::Tensor& positions, int64_t head_dim, double theta,
                               const at::TensorOptions& options) {
  LOOM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary: head dim {} must be even", head_dim);
  LOOM_CHECK(positions.dim() == 1 && positions.scalar_type() == at::kLong, "rotary: positions must be int64 [T]");
  const at::Tensor pos = positions.to(at::kCPU).contiguous();
  const int64_t tokens = pos.size(0), half = head_dim / 2;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor cos = at::empty({tokens, half}, f64), sin = at::empty({tokens, half}, f64);
  std::vector<double> inv_freq(half);  // theta^(-2i/hd)
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
  const int64_t* p = pos.data_ptr<int64_t>();
  double* c = cos.data_ptr<double>();
  double* s = sin.data_ptr<double>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p[t]) * inv_freq[i];
      c[t * half + i] = std::cos(angle), s[t * half + i] = std::sin(angle);
    }
  }
  const auto dtype = at::typeMetaToScalarType(options.dtype());
  return {cos.to(options.device(), dtype), sin.to(options.device(), dtype)};
}

at::Tensor apply_rotary(const at::Tensor& x, const RotaryTable& table) { return rotate(x, table, 1.0); }

at::Tensor apply_rotary_backward(const at::Tensor& dy, const RotaryTable& table) { return rotate(dy, table, -1.0); }

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& positions, double theta) {
  return apply_rotary(x, RotaryTable::build(positions, x.size(-1), theta, x.options().dtype(wide_type(x.scalar_type()))));
}

at::Tensor apply_rotary_backward(const at::Tensor& dy, const at::Tensor& positions, double theta) {
  return apply_rotary_backward(
      dy, RotaryTable::build(positions, dy.size(-1), theta, dy.options().dtype(wide_type(dy.scalar_type()))));
}

}  // namespace loom::nn

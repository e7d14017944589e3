#include "loom/nn/swiglu.h"

#include "loom/core/error.h"

namespace loom::nn {
namespace {

int64_t half_width(const at::Tensor& gate_up) {
  LOOM_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0, "swiglu: last dim {} must be [gate | up], even",
             gate_up.dim() >= 1 ? gate_up.size(-1) : 0);
  return gate_up.size(-1) / 2;
}

}  // namespace

at::Tensor swiglu_forward(const at::Tensor& gate_up) {
  const int64_t h = half_width(gate_up);
  return at::silu(gate_up.narrow(-1, 0, h)).mul_(gate_up.narrow(-1, h, h));
}

// NOTE [SwiGLU backward]: y = silu(g) u with silu(g) = g sigmoid(g), so
//   du = dy silu(g),   dg = dy u silu'(g),   silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
// silu_backward(dy u, g) is the second product; both land in one packed [dg | du] tensor, which
// is what the packed linear's backward takes.
at::Tensor swiglu_backward(const at::Tensor& dy, const at::Tensor& gate_up) {
  const int64_t h = half_width(gate_up);
  LOOM_CHECK(dy.size(-1) == h, "swiglu: gradient's last dim {} is not half of the input's {}", dy.size(-1), 2 * h);
  const at::Tensor gate = gate_up.narrow(-1, 0, h), up = gate_up.narrow(-1, h, h);
  at::Tensor packed = at::empty(gate_up.sizes(), gate_up.options());
  at::Tensor dgate = packed.narrow(-1, 0, h), dup = packed.narrow(-1, h, h);
  at::silu_backward_out(dgate, dy * up, gate);
  at::mul_out(dup, dy, at::silu(gate));
  return packed;
}

// Integer arithmetic throughout: the two-thirds step truncates before rounding up to the
// multiple, which is how the published Llama sizes were derived (it differs from rounding the
// exact 2/3 only when the truncated value is already a multiple).
int64_t swiglu_hidden(int64_t d_model, int64_t ffn_mult, int64_t multiple_of) {
  LOOM_CHECK(d_model > 0 && ffn_mult > 0 && multiple_of > 0,
             "swiglu_hidden: d_model ({}), ffn_mult ({}) and multiple_of ({}) must be positive", d_model, ffn_mult,
             multiple_of);
  const int64_t two_thirds = 2 * ffn_mult * d_model / 3;
  return multiple_of * ((two_thirds + multiple_of - 1) / multiple_of);
}

}  // namespace loom::nn

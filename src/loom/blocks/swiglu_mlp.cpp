#include "loom/blocks/swiglu_mlp.h"

#include <algorithm>

#include "loom/nn/swiglu.h"

namespace loom::blocks {
namespace {
struct State : PreNormState {
  at::Tensor u;   // [gate | up] of the local hidden units, SwiGLU's input (freed after backward_input)
  at::Tensor a;   // SwiGLU's output, down's input
  at::Tensor du;  // gate_up's output gradient, for its weight gradient
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    visit("u", u), visit("a", a), visit("du", du);
  }
};
}  // namespace

SwiGluMlpBlock::SwiGluMlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std,
                               dist::Communicator& tp, parallel::TpOptions options)
    : PreNormBlock(prefix, NormKind::Rms, d_model, tp, options),
      gate_up(prefix + ".gate_up", d_model, 2 * hidden, false, 0.02, tp, /*groups=*/2),
      down(prefix + ".down", hidden, d_model, false, residual_std, tp),
      d_model_(d_model) {}

PreNormState& SwiGluMlpBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<State>(); }

at::Tensor SwiGluMlpBlock::apply(const at::Tensor& h, at::Tensor& u, at::Tensor& a) const {
  u = gate_up.forward(h);
  a = nn::swiglu_forward(u);
  return down.forward_partial(a);
}

at::Tensor SwiGluMlpBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  at::Tensor u, a;
  at::Tensor y = apply(h, u, a);
  parallel::store_chunk(s.u, u, 0, piece.first, piece.count);
  parallel::store_chunk(s.a, a, 0, piece.first, piece.count);
  return y;
}

// Each token on its own: nothing to cache.
at::Tensor SwiGluMlpBlock::decode_piece(const at::Tensor& h, int64_t, nn::DecodeCache&) {
  at::Tensor u, a;
  return apply(h, u, a);
}

at::Tensor SwiGluMlpBlock::backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  const at::Tensor du = nn::swiglu_backward(down.backward_input(dy), s.u.narrow(0, piece.first, piece.rows));
  parallel::store_chunk(s.du, du, 0, piece.first, piece.count);
  return gate_up.backward_input_partial(du);
}

void SwiGluMlpBlock::finish_backward(PreNormState& state) const { static_cast<State&>(state).u.reset(); }

void SwiGluMlpBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<State&>(state);
  down.backward_weight(s.a, s.dy);
  gate_up.backward_weight(s.h, s.du);
}

std::vector<nn::Param*> SwiGluMlpBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  for (nn::Param* p : {&gate_up.weight, &down.weight}) all.push_back(p);
  return all;
}

nn::Cost SwiGluMlpBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = down.local_in();  // hidden / tp
  const double linear = gate_up.flops(rows) + down.flops(rows);
  nn::Cost c;
  c.forward_flops = linear;
  c.backward_input_flops = linear;
  c.backward_weight_flops = linear;
  // x, its statistics and h; u of [rows, 2 hidden / tp] and a of [rows, hidden / tp].
  c.saved_bytes = static_cast<double>((skeleton_saved_elements(batch, seq) + 3 * rows * local) * dtype_bytes);
  c.param_bytes = static_cast<double>((3 * d_model_ * local + norm.param_elements()) * dtype_bytes);
  c.gemm_dim = static_cast<double>(std::min({rows, d_model_, local}));
  c.elementwise_bytes = static_cast<double>(3 * rows * local * dtype_bytes);  // silu(gate) x up
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  return c;
}

}  // namespace loom::blocks

#include "loom/blocks/mlp_block.h"

#include <algorithm>

namespace loom::blocks {
namespace {
struct State : PreNormState {
  at::Tensor u;   // up's output, GELU's input (freed after backward_input)
  at::Tensor a;   // GELU's output, down's input
  at::Tensor du;  // up's output gradient, for its weight gradient
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    visit("u", u), visit("a", a), visit("du", du);
  }
};
}  // namespace

MlpBlock::MlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std,
                   dist::Communicator& tp, parallel::TpOptions options)
    : PreNormBlock(prefix, NormKind::Layer, d_model, tp, options),
      up(prefix + ".up", d_model, hidden, true, 0.02, tp),
      down(prefix + ".down", hidden, d_model, true, residual_std, tp),
      d_model_(d_model) {}

PreNormState& MlpBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<State>(); }

at::Tensor MlpBlock::apply(const at::Tensor& h, at::Tensor& u, at::Tensor& a) const {
  u = up.forward(h);
  a = at::gelu(u, "tanh");
  return down.forward_partial(a);
}

at::Tensor MlpBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  at::Tensor u, a;
  at::Tensor y = apply(h, u, a);
  parallel::store_chunk(s.u, u, 0, piece.first, piece.count);
  parallel::store_chunk(s.a, a, 0, piece.first, piece.count);
  return y;
}

// Each token on its own: nothing to cache.
at::Tensor MlpBlock::decode_piece(const at::Tensor& h, int64_t, nn::DecodeCache&) {
  at::Tensor u, a;
  return apply(h, u, a);
}

at::Tensor MlpBlock::backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  const at::Tensor du = at::gelu_backward(down.backward_input(dy), s.u.narrow(0, piece.first, piece.rows), "tanh");
  parallel::store_chunk(s.du, du, 0, piece.first, piece.count);
  return up.backward_input_partial(du);
}

void MlpBlock::finish_backward(PreNormState& state) const { static_cast<State&>(state).u.reset(); }

void MlpBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<State&>(state);
  down.backward_weight(s.a, s.dy);
  up.backward_weight(s.h, s.du);
}

std::vector<nn::Param*> MlpBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  for (nn::Param* p : {&up.weight, &up.bias, &down.weight, &down.bias}) all.push_back(p);
  return all;
}

nn::Cost MlpBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = down.local_in();  // hidden / tp
  const double linear = up.flops(rows) + down.flops(rows);
  nn::Cost c;
  c.forward_flops = linear;
  c.backward_input_flops = linear;
  c.backward_weight_flops = linear;
  // x, its statistics and h; u and a of [rows, hidden / tp].
  c.saved_bytes = static_cast<double>((skeleton_saved_elements(batch, seq) + 2 * rows * local) * dtype_bytes);
  // Backward beyond that state: down's input gradient and GELU's (du) of [rows, hidden / tp] at
  // once, before u is freed (measured on gpt shapes, issue 33: 8.2 x [rows, d_model] at hidden =
  // 4 x d_model).
  c.workspace_bytes = static_cast<double>(2 * rows * local * dtype_bytes);
  c.param_bytes = static_cast<double>((2 * d_model_ * local + local + d_model_ + norm.param_elements()) * dtype_bytes);
  c.gemm_dim = static_cast<double>(std::min({rows, d_model_, local}));
  c.elementwise_bytes = static_cast<double>(4 * rows * local * dtype_bytes);  // bias and GELU on the hidden
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  return c;
}

}  // namespace loom::blocks

#include "loom/blocks/mlp_block.h"

#include <algorithm>

#include "loom/nn/swiglu.h"

namespace loom::blocks {
namespace {
struct MlpState : PreNormState {
  at::Tensor u;   // up's output, the activation's input (freed after backward_input)
  at::Tensor a;   // the activation's output, down's input
  at::Tensor du;  // up's output gradient, for its weight gradient
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    visit("u", u), visit("a", a), visit("du", du);
  }
};

const char* up_name(MlpActivation activation) { return activation == MlpActivation::SwiGlu ? ".gate_up" : ".up"; }
// The groups of up's output: 1, or 2 for SwiGLU's [gate | up].
int64_t up_groups(MlpActivation activation) { return activation == MlpActivation::SwiGlu ? 2 : 1; }
}  // namespace

MlpBlock::MlpBlock(const std::string& prefix, const MlpShape& shape, dist::Communicator& tp, parallel::TpOptions options)
    : PreNormBlock(prefix, shape.norm, shape.d_model, tp, options),
      up(prefix + up_name(shape.activation), shape.d_model, up_groups(shape.activation) * shape.hidden, shape.bias, 0.02,
         tp, /*groups=*/up_groups(shape.activation)),
      down(prefix + ".down", shape.hidden, shape.d_model, shape.bias, shape.residual_std, tp),
      shape_(shape) {}

PreNormState& MlpBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<MlpState>(); }

at::Tensor MlpBlock::apply(const at::Tensor& h, at::Tensor& u, at::Tensor& a) const {
  u = up.forward(h);
  a = shape_.activation == MlpActivation::SwiGlu ? nn::swiglu_forward(u) : at::gelu(u, "tanh");
  return down.forward_partial(a);
}

at::Tensor MlpBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<MlpState&>(state);
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
  auto& s = static_cast<MlpState&>(state);
  const at::Tensor da = down.backward_input(dy), u = s.u.narrow(0, piece.first, piece.rows);
  const at::Tensor du =
      shape_.activation == MlpActivation::SwiGlu ? nn::swiglu_backward(da, u) : at::gelu_backward(da, u, "tanh");
  parallel::store_chunk(s.du, du, 0, piece.first, piece.count);
  return up.backward_input_partial(du);
}

void MlpBlock::finish_backward(PreNormState& state) const { static_cast<MlpState&>(state).u.reset(); }

void MlpBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<MlpState&>(state);
  down.backward_weight(s.a, s.dy);
  up.backward_weight(s.h, s.du);
}

std::vector<nn::Param*> MlpBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  all.push_back(&up.weight);
  if (shape_.bias) all.push_back(&up.bias);
  all.push_back(&down.weight);
  if (shape_.bias) all.push_back(&down.bias);
  return all;
}

nn::Cost MlpBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = down.local_in(), d_model = shape_.d_model;  // local: hidden / tp
  const int64_t groups = up_groups(shape_.activation), bias_elements = shape_.bias ? groups * local + d_model : 0;
  const double linear = up.flops(rows) + down.flops(rows);
  nn::Cost c;
  c.forward_flops = linear;
  c.backward_input_flops = linear;
  c.backward_weight_flops = linear;
  // x, its statistics and h; u of [rows, groups x hidden / tp] and a of [rows, hidden / tp].
  c.saved_bytes = static_cast<double>((skeleton_saved_elements(batch, seq) + (groups + 1) * rows * local) * dtype_bytes);
  // Backward beyond that state: down's input gradient and the activation's (du) at once, before u
  // is freed (measured on gpt shapes, issue 33: 8.2 x [rows, d_model] at hidden = 4 x d_model).
  c.workspace_bytes = static_cast<double>((1 + groups) * rows * local * dtype_bytes);
  c.param_bytes =
      static_cast<double>(((groups + 1) * d_model * local + bias_elements + norm.param_elements()) * dtype_bytes);
  c.gemm_dim = static_cast<double>(std::min({rows, d_model, local}));
  // The activation reads u and writes a (GELU: 2 x [rows, hidden / tp]; SwiGLU reads gate and up:
  // 3); a bias is read and written once more on the hidden, but not by a kernel that fuses it
  // with the activation (NOTE [Kernel fusion]).
  const int64_t activation_passes = groups + 1, bias_passes = shape_.bias ? 2 : 0;
  c.elementwise_bytes = static_cast<double>((activation_passes + bias_passes) * rows * local * dtype_bytes);
  c.fusable_bytes = static_cast<double>(bias_passes * rows * local * dtype_bytes);
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  return c;
}

}  // namespace loom::blocks

#include "loom/nn/mlp_block.h"

namespace loom::nn {
namespace {
struct State : SavedState {
  at::Tensor x, mean, rstd;     // input and its norm statistics (freed after backward_input)
  at::Tensor h;                 // normed input, up's input
  at::Tensor u;                 // up's output, GELU's input (freed after backward_input)
  at::Tensor a;                 // GELU's output, down's input
  at::Tensor dy, du;            // gradients the weight-gradient half needs
  NormGrads norm_grads;         // the norm's parameter gradients, from backward_input
};
}  // namespace

MlpBlock::MlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std,
                   dist::Communicator& tp)
    : norm(prefix + ".norm", d_model),
      up(prefix + ".up", d_model, hidden, true, 0.02, tp),
      down(prefix + ".down", hidden, d_model, true, residual_std, tp),
      prefix_(prefix),
      d_model_(d_model),
      hidden_(hidden) {}

at::Tensor MlpBlock::forward(const at::Tensor& x, const MicroBatch&, Saved& saved) {
  auto& s = saved.emplace<State>();
  auto n = norm.forward(x);
  s.x = x, s.mean = n.mean, s.rstd = n.rstd, s.h = n.y;
  s.u = up.forward(n.y);
  s.a = at::gelu(s.u, "tanh");
  return x + down.forward(s.a);
}

at::Tensor MlpBlock::backward_input(const at::Tensor& dy, Saved& saved) {
  auto& s = saved.get<State>();
  s.dy = dy;
  s.du = at::gelu_backward(down.backward_input(dy), s.u, "tanh");
  s.u.reset();
  s.norm_grads = norm.backward(up.backward_input(s.du), s.x, s.mean, s.rstd);
  s.x.reset(), s.mean.reset(), s.rstd.reset();
  at::Tensor dx = std::move(s.norm_grads.dx);
  return dx.add_(dy);  // the residual branch
}

void MlpBlock::backward_weight(Saved& saved) {
  auto& s = saved.get<State>();
  down.backward_weight(s.a, s.dy);
  up.backward_weight(s.h, s.du);
  norm.accumulate(s.norm_grads);
  saved.clear();
}

std::vector<Param*> MlpBlock::params() {
  return {&norm.gain, &norm.bias, &up.weight, &up.bias, &down.weight, &down.bias};
}

Cost MlpBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq;
  const double linear = up.flops(rows) + down.flops(rows);
  Cost c;
  c.forward_flops = linear;
  c.backward_input_flops = linear;
  c.backward_weight_flops = linear;
  const int64_t local = down.local_in();  // hidden / tp
  c.saved_bytes = static_cast<double>((2 * rows * d_model_ + 2 * rows * local) * dtype_bytes);
  c.param_bytes = static_cast<double>((2 * d_model_ * local + local + 3 * d_model_) * dtype_bytes);
  return c;
}

}  // namespace loom::nn

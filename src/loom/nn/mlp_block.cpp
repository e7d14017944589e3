#include "loom/nn/mlp_block.h"

#include "loom/core/error.h"
#include "loom/parallel/chunked_all_reduce.h"

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
                   dist::Communicator& tp, int64_t overlap_chunks)
    : tp_(tp),
      chunks_(tp.size() > 1 ? overlap_chunks : 1),
      norm(prefix + ".norm", d_model),
      up(prefix + ".up", d_model, hidden, true, 0.02, tp),
      down(prefix + ".down", hidden, d_model, true, residual_std, tp),
      prefix_(prefix),
      d_model_(d_model),
      hidden_(hidden) {}

at::Tensor MlpBlock::forward(const at::Tensor& x, const MicroBatch&, Saved& saved) {
  auto& s = saved.emplace<State>();
  auto n = norm.forward(x);
  s.x = x, s.mean = n.mean, s.rstd = n.rstd, s.h = n.y;
  if (chunks_ == 1) {
    s.u = up.forward(n.y);
    s.a = at::gelu(s.u, "tanh");
    return x + down.forward(s.a);
  }
  // NOTE [Sub-pipelined TP]: each chunk's down projection is reduced while the next computes.
  const int64_t batch = x.size(0);
  s.u = at::empty({batch, x.size(1), down.local_in()}, x.options());
  s.a = at::empty_like(s.u);
  at::Tensor y = at::empty_like(x);
  parallel::ChunkedAllReduce reduce(tp_);
  for (int64_t c = 0; c < chunks_; ++c) {
    const auto [first, rows] = parallel::chunk_rows(batch, chunks_, c);
    at::Tensor u = s.u.narrow(0, first, rows), a = s.a.narrow(0, first, rows), y_c = y.narrow(0, first, rows);
    u.copy_(up.forward(n.y.narrow(0, first, rows)));
    a.copy_(at::gelu(u, "tanh"));
    y_c.copy_(down.forward_partial(a));
    reduce.start(y_c);
  }
  reduce.finish();
  down.add_bias(y);
  return y.add_(x);
}

at::Tensor MlpBlock::backward_input(const at::Tensor& dy, Saved& saved) {
  auto& s = saved.get<State>();
  s.dy = dy;
  s.du = at::gelu_backward(down.backward_input(dy), s.u, "tanh");
  s.u.reset();
  at::Tensor dh;
  if (chunks_ == 1) {
    dh = up.backward_input(s.du);
  } else {  // NOTE [Sub-pipelined TP]: each chunk's input gradient is reduced while the next computes
    const int64_t batch = dy.size(0);
    dh = at::empty_like(dy);
    parallel::ChunkedAllReduce reduce(tp_);
    for (int64_t c = 0; c < chunks_; ++c) {
      const auto [first, rows] = parallel::chunk_rows(batch, chunks_, c);
      at::Tensor dh_c = dh.narrow(0, first, rows);
      dh_c.copy_(up.backward_input_partial(s.du.narrow(0, first, rows)));
      reduce.start(dh_c);
    }
    reduce.finish();
  }
  s.norm_grads = norm.backward(dh, s.x, s.mean, s.rstd);
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

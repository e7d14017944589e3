#include "loom/blocks/mlp_block.h"

#include <optional>

#include "loom/core/error.h"

namespace loom::blocks {
namespace {
struct State : nn::SavedState {
  at::Tensor x, mean, rstd;     // input and its norm statistics (freed after backward_input)
  at::Tensor h;                 // normed input, up's input (see AttentionBlock's State)
  at::Tensor u;                 // up's output, GELU's input (freed after backward_input)
  at::Tensor a;                 // GELU's output, down's input
  at::Tensor dy, du;            // gradients the weight-gradient half needs
  nn::NormGrads norm_grads;         // the norm's parameter gradients, from backward_input
};
}  // namespace

MlpBlock::MlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std,
                   dist::Communicator& tp, parallel::TpOptions options)
    : tp_(tp),
      chunks_(tp.size() > 1 ? options.overlap : 1),
      sequence_(tp.size() > 1 && options.sequence),
      norm(prefix + ".norm", d_model, sequence_),
      up(prefix + ".up", d_model, hidden, true, 0.02, tp),
      down(prefix + ".down", hidden, d_model, true, residual_std, tp),
      prefix_(prefix),
      d_model_(d_model),
      hidden_(hidden) {}

at::Tensor MlpBlock::forward(const at::Tensor& x, const nn::MicroBatch&, nn::Saved& saved) {
  const int64_t batch = x.size(0);
  auto& s = saved.emplace<State>();
  auto n = norm.forward(x);
  s.x = x, s.mean = n.mean, s.rstd = n.rstd, s.h = n.y;
  parallel::TpRegion region(tp_, sequence_);
  region.enter_chunks(n.y, chunks_);
  for (int64_t c = 0; c < chunks_; ++c) {
    const int64_t first = parallel::chunk_rows(batch, chunks_, c).first;
    const at::Tensor u = up.forward(region.next_entered());
    const at::Tensor a = at::gelu(u, "tanh");
    parallel::store_chunk(s.u, u, 0, first, chunks_);
    parallel::store_chunk(s.a, a, 0, first, chunks_);
    region.leave(down.forward_partial(a));  // reduced while the next chunk computes
  }
  at::Tensor y = region.finish();
  down.add_bias(y);
  return y.add_(x);
}

at::Tensor MlpBlock::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<State>();
  const int64_t batch = dy.size(0);
  std::optional<parallel::PendingSequenceGather> h_full;
  if (sequence_) h_full.emplace(tp_, s.h);  // up's weight gradient needs every token's input
  parallel::TpRegion region(tp_, sequence_);
  region.enter_chunks(dy, chunks_);
  for (int64_t c = 0; c < chunks_; ++c) {
    const int64_t first = parallel::chunk_rows(batch, chunks_, c).first;
    const at::Tensor dy_c = region.next_entered();
    parallel::store_chunk(s.dy, dy_c, 0, first, chunks_);
    const at::Tensor du = at::gelu_backward(down.backward_input(dy_c), s.u.narrow(0, first, dy_c.size(0)), "tanh");
    parallel::store_chunk(s.du, du, 0, first, chunks_);
    region.leave(up.backward_input_partial(du));  // reduced while the next chunk computes
  }
  const at::Tensor dh = region.finish();
  s.u.reset();
  s.norm_grads = norm.backward(dh, s.x, s.mean, s.rstd);
  s.x.reset(), s.mean.reset(), s.rstd.reset();
  if (h_full) s.h = h_full->wait();
  at::Tensor dx = std::move(s.norm_grads.dx);
  return dx.add_(dy);  // the residual branch
}

void MlpBlock::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<State>();
  down.backward_weight(s.a, s.dy);
  up.backward_weight(s.h, s.du);
  norm.accumulate(s.norm_grads);
  saved.clear();
}

std::vector<nn::Param*> MlpBlock::params() {
  return {&norm.gain, &norm.bias, &up.weight, &up.bias, &down.weight, &down.bias};
}

nn::Cost MlpBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, norm_rows = sequence_ ? rows / tp_.size() : rows;
  const double linear = up.flops(rows) + down.flops(rows);
  nn::Cost c;
  c.forward_flops = linear;
  c.backward_input_flops = linear;
  c.backward_weight_flops = linear;
  const int64_t local = down.local_in();  // hidden / tp
  c.saved_bytes = static_cast<double>((2 * norm_rows * d_model_ + 2 * rows * local) * dtype_bytes);
  c.param_bytes = static_cast<double>((2 * d_model_ * local + local + 3 * d_model_) * dtype_bytes);
  return c;
}

}  // namespace loom::blocks

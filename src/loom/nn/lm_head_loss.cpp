#include "loom/nn/lm_head_loss.h"

namespace loom::nn {
namespace {
struct State : SavedState {
  at::Tensor x;        // [rows, d_model]
  std::vector<int64_t> input_shape;
  at::Tensor dlogits;  // [rows, vocab]: softmax - onehot, without the loss scale
  double scale = 1.0;
};
}  // namespace

LmHeadLoss::LmHeadLoss(int64_t d_model, int64_t vocab)
    : head("head", d_model, vocab, false, 0.02), d_model_(d_model), vocab_(vocab) {}

at::Tensor LmHeadLoss::forward(const at::Tensor& x, const MicroBatch& mb, Saved& saved) {
  auto& s = saved.emplace<State>();
  s.x = x.reshape({-1, d_model_});
  s.input_shape = x.sizes().vec();
  const at::Tensor targets = mb.targets.reshape({-1, 1});
  // One fused pass for log-softmax, one for its exponent: fewer passes over the [rows, vocab]
  // logits than logsumexp + exp, and the loss scale is applied in the backward GEMMs instead of
  // another pass.
  at::Tensor logp = at::_log_softmax(head.forward(s.x), 1, /*half_to_float=*/false);
  const at::Tensor loss = logp.gather(1, targets).sum().mul_(-mb.loss_scale);
  logp.exp_().scatter_add_(1, targets, at::full({targets.size(0), 1}, -1.0, logp.options()));
  s.dlogits = logp;
  s.scale = mb.loss_scale;
  return loss;
}

at::Tensor LmHeadLoss::backward_input(const at::Tensor&, Saved& saved) {
  auto& s = saved.get<State>();
  // dx = scale * dlogits W
  const at::Tensor& w = head.weight.value;
  at::Tensor dx = at::empty({s.dlogits.size(0), w.size(1)}, w.options());
  at::addmm_out(dx, dx, s.dlogits, w, /*beta=*/0, /*alpha=*/s.scale);
  return dx.view(s.input_shape);
}

void LmHeadLoss::backward_weight(Saved& saved) {
  auto& s = saved.get<State>();
  head.weight.grad.addmm_(s.dlogits.t(), s.x, /*beta=*/1, /*alpha=*/s.scale);
  saved.clear();
}

Cost LmHeadLoss::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq;
  Cost c;
  c.forward_flops = head.flops(rows);
  c.backward_input_flops = head.flops(rows);
  c.backward_weight_flops = head.flops(rows);
  c.saved_bytes = static_cast<double>(rows * (vocab_ + d_model_) * dtype_bytes);
  c.param_bytes = static_cast<double>(vocab_ * d_model_ * dtype_bytes);
  return c;
}

}  // namespace loom::nn

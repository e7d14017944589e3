#include "loom/nn/lm_head_loss.h"

namespace loom::nn {
namespace {
struct State : SavedState {
  at::Tensor x;        // [rows, d_model]
  std::vector<int64_t> input_shape;
  at::Tensor dlogits;  // [rows, vocab], already scaled
};
}  // namespace

LmHeadLoss::LmHeadLoss(int64_t d_model, int64_t vocab)
    : head("head", d_model, vocab, false, 0.02), d_model_(d_model), vocab_(vocab) {}

at::Tensor LmHeadLoss::forward(const at::Tensor& x, const MicroBatch& mb, Saved& saved) {
  auto& s = saved.emplace<State>();
  s.x = x.reshape({-1, d_model_});
  s.input_shape = x.sizes().vec();
  const at::Tensor targets = mb.targets.reshape({-1, 1});
  at::Tensor z = head.forward(s.x);
  const at::Tensor lse = z.logsumexp(1, /*keepdim=*/true);
  const at::Tensor loss = (lse - z.gather(1, targets)).sum() * mb.loss_scale;
  // z becomes dL/dz in place: softmax(z) - onehot(target), times the loss scale.
  z.sub_(lse).exp_();
  z.scatter_add_(1, targets, at::full({targets.size(0), 1}, -1.0, z.options()));
  s.dlogits = z.mul_(mb.loss_scale);
  return loss;
}

at::Tensor LmHeadLoss::backward_input(const at::Tensor&, Saved& saved) {
  auto& s = saved.get<State>();
  return head.backward_input(s.dlogits).view(s.input_shape);
}

void LmHeadLoss::backward_weight(Saved& saved) {
  auto& s = saved.get<State>();
  head.backward_weight(s.x, s.dlogits);
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

#include "loom/blocks/final_norm.h"

namespace loom::blocks {
namespace {
struct State : nn::SavedState {
  at::Tensor x, mean, rstd;
  nn::NormGrads grads;
};
}  // namespace

FinalNorm::FinalNorm(int64_t d_model, int64_t sequence_shards)
    : norm("final_norm", d_model, sequence_shards > 1), shards_(sequence_shards), d_model_(d_model) {}

at::Tensor FinalNorm::forward(const at::Tensor& x, const nn::MicroBatch&, nn::Saved& saved) {
  auto& s = saved.emplace<State>();
  auto n = norm.forward(x);
  s.x = x, s.mean = n.mean, s.rstd = n.rstd;
  return n.y;
}

at::Tensor FinalNorm::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<State>();
  s.grads = norm.backward(dy, s.x, s.mean, s.rstd);
  s.x.reset(), s.mean.reset(), s.rstd.reset();
  return std::move(s.grads.dx);
}

void FinalNorm::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<State>();
  norm.accumulate(s.grads);
  saved.clear();
}

nn::Cost FinalNorm::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  nn::Cost c;
  c.saved_bytes = static_cast<double>(batch * seq / shards_ * d_model_ * dtype_bytes);
  c.param_bytes = static_cast<double>(2 * d_model_ * dtype_bytes);
  return c;
}

}  // namespace loom::blocks

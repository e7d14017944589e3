#include "loom/blocks/final_norm.h"

#include "loom/core/error.h"

namespace loom::blocks {
namespace {
struct FinalNormState : nn::SavedState {
  NormState norm;
  void for_each_tensor(const nn::TensorVisitor& visit) override { norm.for_each_tensor(visit); }
};
}  // namespace

FinalNorm::FinalNorm(int64_t d_model, int64_t sequence_shards, NormKind kind)
    : norm(kind, "final_norm", d_model, sequence_shards > 1), shards_(sequence_shards) {}

at::Tensor FinalNorm::forward(const at::Tensor& x, const nn::MicroBatch&, nn::Saved& saved) {
  return norm.forward(x, saved.emplace<FinalNormState>().norm);
}

at::Tensor FinalNorm::decode(const at::Tensor& x, int64_t, nn::DecodeCache&) {
  LOOM_CHECK(shards_ == 1, "[decode] the final norm decodes whole sequences, not a tp_sequence shard");
  NormState s;
  return norm.forward(x, s);
}

at::Tensor FinalNorm::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  return norm.backward(dy, saved.get<FinalNormState>().norm);
}

void FinalNorm::backward_weight(nn::Saved& saved) {
  norm.accumulate(saved.get<FinalNormState>().norm);
  saved.clear();
}

nn::Cost FinalNorm::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  nn::Cost c;
  c.saved_bytes = static_cast<double>(norm.saved_elements(batch * seq / shards_) * dtype_bytes);
  c.param_bytes = static_cast<double>(norm.param_elements() * dtype_bytes);
  c.elementwise_bytes = 2.0 * static_cast<double>(norm.saved_elements(batch * seq / shards_) * dtype_bytes);  // about in and out
  return c;
}

}  // namespace loom::blocks

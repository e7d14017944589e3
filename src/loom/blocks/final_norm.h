#pragma once
// The final LayerNorm before the LM head, as a chain layer. Under tp_sequence the tokens are
// split over `sequence_shards` (= tp) ranks and it normalises this rank's; the head gathers them.
#include "loom/nn/layer.h"
#include "loom/nn/layer_norm.h"

namespace loom::blocks {

class FinalNorm final : public nn::Layer {
 public:
  explicit FinalNorm(int64_t d_model, int64_t sequence_shards = 1);

  std::string name() const override { return "final_norm"; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override { return norm.params(); }
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  nn::LayerNorm norm;

 private:
  int64_t shards_, d_model_;
};

}  // namespace loom::blocks

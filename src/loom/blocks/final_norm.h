#pragma once
// The final norm before the LM head (LayerNorm for a GPT, RMSNorm for a Llama), as a chain layer.
// Under tp_sequence the tokens are split over `sequence_shards` (= tp) ranks and it normalises
// this rank's; the head gathers them. It decodes (NOTE [Decoding]) as it runs forward: per token.
#include "loom/blocks/block_norm.h"
#include "loom/nn/decode.h"
#include "loom/nn/layer.h"

namespace loom::blocks {

class FinalNorm final : public nn::Layer, public nn::Decodable {
 public:
  explicit FinalNorm(int64_t d_model, int64_t sequence_shards = 1, NormKind kind = NormKind::Layer);

  std::string name() const override { return "final_norm"; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override { return norm.params(); }
  at::Tensor decode(const at::Tensor& x, int64_t position, nn::DecodeCache& cache) override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  BlockNorm norm;

 private:
  int64_t shards_;
};

}  // namespace loom::blocks

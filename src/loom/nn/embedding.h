#pragma once
// Token + learned position embedding: y[b, t] = wte[tokens[b, t]] + wpe[t]. The chain's first
// layer: its input is the token ids, so backward_input returns an undefined tensor.
#include "loom/nn/layer.h"

namespace loom::nn {

class TokenPositionEmbedding final : public Layer {
 public:
  TokenPositionEmbedding(int64_t vocab, int64_t positions, int64_t d_model);

  std::string name() const override { return "embedding"; }
  at::Tensor forward(const at::Tensor& tokens, const MicroBatch& mb, Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, Saved& saved) override;
  void backward_weight(Saved& saved) override;
  std::vector<Param*> params() override { return {&token_table, &position_table}; }
  Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  Param token_table;     // wte [vocab, d_model]
  Param position_table;  // wpe [positions, d_model]

 private:
  int64_t d_model_;
};

}  // namespace loom::nn

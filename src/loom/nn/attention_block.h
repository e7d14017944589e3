#pragma once
// Pre-norm causal self-attention sub-block: y = x + proj(attention(split_heads(qkv(ln(x))))).
// One chain layer, so a pipeline stage boundary may fall between it and the MLP sub-block.
#include "loom/nn/layer.h"
#include "loom/nn/layer_norm.h"
#include "loom/nn/linear.h"

namespace loom::nn {

class AttentionBlock final : public Layer {
 public:
  // `prefix` names the parameters, e.g. "blocks.0.attn"; `residual_std` initialises the output
  // projection (GPT-2 scales it by 1/sqrt(2 * n_layers)).
  AttentionBlock(const std::string& prefix, int64_t d_model, int64_t n_heads, int64_t tile, double residual_std);

  std::string name() const override { return prefix_; }
  at::Tensor forward(const at::Tensor& x, const MicroBatch& mb, Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, Saved& saved) override;
  void backward_weight(Saved& saved) override;
  std::vector<Param*> params() override;
  Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  LayerNorm norm;
  Linear qkv;   // d_model -> 3 d_model, laid out [q | k | v], each head-major
  Linear proj;  // d_model -> d_model

 private:
  std::string prefix_;
  int64_t d_model_, n_heads_, tile_;
};

}  // namespace loom::nn

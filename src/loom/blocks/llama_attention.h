#pragma once
// Llama's pre-norm causal self-attention sub-block:
//   y = x + proj(attention(rotary(q(h)), rotary(k(h)), v(h))),  h = rmsnorm(x)
// with grouped-query attention (n_kv_heads key/value heads, each serving n_heads / n_kv_heads
// consecutive query heads), rotary position embeddings on q and k at the tokens' GLOBAL
// positions (under sequence parallelism this rank's segments, or the ring's two chunks:
// parallel::sequence_chunks) and no biases.
//
// Tensor parallelism over `tp`: q is column-parallel over the query heads, kv column-parallel over
// the kv heads with its two groups [k | v] split separately (a rank holds k and v of its kv
// heads, which serve exactly its query heads), proj row-parallel. Communication: NOTE [Pre-norm
// sub-block], plus the attention core's over sp (NOTE [Attention cores]), which moves the kv
// heads, not their expansion.
#include <optional>

#include "loom/blocks/pre_norm_block.h"
#include "loom/nn/rotary.h"
#include "loom/parallel/attention_core.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

struct LlamaAttentionShape {
  int64_t d_model = 0, n_heads = 0, n_kv_heads = 0;
  nn::AttentionKernel kernel;  // NOTE [Attention kernels]
  double rope_theta = nn::kRotaryTheta;
  double residual_std = 0.02;  // proj's initialisation
};

class LlamaAttentionBlock final : public PreNormBlock {
 public:
  // `prefix` names the parameters, e.g. "blocks.0.attn".
  LlamaAttentionBlock(const std::string& prefix, const LlamaAttentionShape& shape, dist::Communicator& tp,
                      parallel::TpOptions options = {}, parallel::SpOptions sp = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  parallel::ColumnParallelLinear q;   // d_model -> n_heads x head_dim, head-major
  parallel::ColumnParallelLinear kv;  // d_model -> [k | v], each n_kv_heads x head_dim
  parallel::RowParallelLinear proj;   // d_model -> d_model

 private:
  PreNormState& emplace_state(nn::Saved& saved) const override;
  at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) override;
  at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) override;
  at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) override;
  void finish_backward(PreNormState& s) const override;
  void weight_gradients(PreNormState& s) override;
  // cos and sin of this rank's `tokens` positions, built once per length and dtype.
  const nn::RotaryTable& rotary(int64_t tokens, const at::TensorOptions& options);
  // The type rotary tables are built in for activations h.
  static at::TensorOptions rotary_options(const at::Tensor& h);
  // h [B, T, d_model] -> rotated q [B, heads, T, hd], rotated k and v [B, kv heads, T, hd], at the
  // positions of `table`.
  struct Heads {
    at::Tensor q, k, v;
  };
  Heads split_heads(const at::Tensor& h, const nn::RotaryTable& table);
  // The attention's output [B, heads, T, hd] -> proj's input [B, T, heads x hd].
  at::Tensor merge_heads(const at::Tensor& out) const;

  std::unique_ptr<parallel::AttentionCore> core_;  // this layout's attention (NOTE [Attention cores])
  std::vector<int64_t> sequence_chunks_;           // which chunks of the sequence this rank holds
  int64_t d_model_, local_heads_, local_kv_heads_, head_dim_;
  nn::AttentionKernel kernel_;  // NOTE [Attention kernels]
  double theta_;
  std::optional<nn::RotaryTable> rotary_;
};

}  // namespace loom::blocks

#pragma once
// The pre-norm causal self-attention sub-block of a decoder:
//   y = x + proj(attention(rotary(q(h)), rotary(k(h)), v(h))),  h = norm(x)
// as the model kind shapes it (AttentionShape):
//   GPT    LayerNorm, biases, no rotary, one projection qkv = [q | k | v] (n_kv_heads = n_heads);
//   Llama  RMSNorm, no biases, rotary positions on q and k at the tokens' GLOBAL positions (under
//          sequence parallelism this rank's segments, or the ring's two chunks:
//          parallel::sequence_chunks), and grouped-query attention: n_kv_heads key/value heads,
//          each serving n_heads / n_kv_heads consecutive query heads, with q and kv = [k | v] as
//          two projections.
// One chain layer, so a pipeline stage boundary may fall between it and the MLP sub-block.
//
// Tensor parallelism over `tp` (a communicator of one rank for a serial model): the heads are
// split, the input projections are column-parallel with each group ([q | k | v], or [k | v])
// split separately, so a rank holds q, k and v of its heads (its kv heads serve exactly its query
// heads), and proj is row-parallel. Communication: NOTE [Pre-norm sub-block] (the tensor-parallel
// region, tp_sequence, tp_overlap), plus the attention core's over sp under sequence parallelism,
// where x holds this rank's segments of the sequence (NOTE [Attention cores]), once per
// tp_overlap piece; it moves the kv heads, not their expansion.
#include <optional>

#include "loom/blocks/pre_norm_block.h"
#include "loom/nn/rotary.h"
#include "loom/parallel/attention_core.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

struct AttentionShape {
  int64_t d_model = 0, n_heads = 0;
  int64_t n_kv_heads = 0;  // 0: n_heads (plain multi-head attention)
  nn::AttentionKernel kernel;  // NOTE [Attention kernels]
  NormKind norm = NormKind::Layer;
  bool bias = true;       // on every projection
  bool fused_qkv = true;  // one projection [q | k | v] ("qkv"), or "q" and "kv" = [k | v]
  double rope_theta = 0;  // rotary positions with this base; 0: none
  double residual_std = 0.02;  // proj's initialisation (GPT-2 scales it by 1/sqrt(2 * n_layers))
};

class AttentionBlock final : public PreNormBlock {
 public:
  // `prefix` names the parameters, e.g. "blocks.0.attn".
  AttentionBlock(const std::string& prefix, const AttentionShape& shape, dist::Communicator& tp,
                 parallel::TpOptions options = {}, parallel::SpOptions sp = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  // The input projections: qkv (fused_qkv) or q and kv; each head-major within its groups.
  std::optional<parallel::ColumnParallelLinear> qkv, q, kv;
  parallel::RowParallelLinear proj;  // d_model -> d_model

 private:
  PreNormState& emplace_state(nn::Saved& saved) const override;
  at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) override;
  void finish_forward(at::Tensor& y) const override { proj.add_bias(y); }
  at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) override;
  at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) override;
  void finish_backward(PreNormState& s) const override;
  void weight_gradients(PreNormState& s) override;
  // cos and sin of this rank's `tokens` positions, built once per length and type (null: no rotary).
  const nn::RotaryTable* rotary(int64_t tokens, const at::TensorOptions& options);
  // The type rotary tables are built in for activations h.
  static at::TensorOptions rotary_options(const at::Tensor& h);
  // h [B, T, d_model] -> q [B, heads, T, hd], k and v [B, kv heads, T, hd] (q and k rotated at the
  // positions of `table` when there is one).
  struct Heads {
    at::Tensor q, k, v;
  };
  Heads split_heads(const at::Tensor& h, const nn::RotaryTable* table);
  // The attention's output [B, heads, T, hd] -> proj's input [B, T, heads x hd].
  at::Tensor merge_heads(const at::Tensor& out) const;
  // The input gradient through the projections from the attention's; their output gradients
  // (qkv's, or q's and kv's) into `grads` for the weight gradients.
  at::Tensor projections_backward(const parallel::AttentionInputGrads& g, const nn::RotaryTable* table,
                                  int64_t rows, int64_t seq, const Piece& piece, std::vector<at::Tensor>& grads);
  // nn::Cost::workspace_bytes: the backward's temporaries beyond the saved state.
  double backward_workspace(int64_t batch, int64_t seq, int64_t dtype_bytes) const;

  AttentionShape shape_;
  std::unique_ptr<parallel::AttentionCore> core_;  // this layout's attention (NOTE [Attention cores])
  std::vector<int64_t> sequence_chunks_;           // which chunks of the sequence this rank holds
  int64_t local_heads_, local_kv_heads_, head_dim_;
  std::optional<nn::RotaryTable> rotary_;
};

}  // namespace loom::blocks

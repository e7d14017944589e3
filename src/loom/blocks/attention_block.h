#pragma once
// GPT's pre-norm causal self-attention sub-block: y = x + proj(attention(split_heads(qkv(ln(x))))).
// One chain layer, so a pipeline stage boundary may fall between it and the MLP sub-block.
//
// Tensor parallelism over `tp` (a communicator of one rank for a serial model): the heads are
// split, qkv is column-parallel (each rank holds q, k and v of its heads) and proj row-parallel.
// Communication: NOTE [Pre-norm sub-block] (the tensor-parallel region, tp_sequence,
// tp_overlap), plus the attention core's over sp under sequence parallelism, where x holds this
// rank's segments of the sequence (NOTE [Attention cores]), once per tp_overlap piece.
#include "loom/blocks/pre_norm_block.h"
#include "loom/parallel/attention_core.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

class AttentionBlock final : public PreNormBlock {
 public:
  // `prefix` names the parameters, e.g. "blocks.0.attn"; `residual_std` initialises the output
  // projection (GPT-2 scales it by 1/sqrt(2 * n_layers)).
  AttentionBlock(const std::string& prefix, int64_t d_model, int64_t n_heads, const nn::AttentionKernel& kernel,
                 double residual_std,
                 dist::Communicator& tp, parallel::TpOptions options = {}, parallel::SpOptions sp = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  parallel::ColumnParallelLinear qkv;  // d_model -> 3 d_model as [q | k | v], each head-major
  parallel::RowParallelLinear proj;    // d_model -> d_model

 private:
  PreNormState& emplace_state(nn::Saved& saved) const override;
  at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) override;
  void finish_forward(at::Tensor& y) const override { proj.add_bias(y); }
  at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) override;
  at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) override;
  void finish_backward(PreNormState& s) const override;
  void weight_gradients(PreNormState& s) override;
  // h [B, T, d_model] -> q, k, v of the local heads, [3, B, heads, T, hd].
  at::Tensor split_heads(const at::Tensor& h);
  // The attention's output [B, heads, T, hd] -> proj's input [B, T, d_model / tp].
  at::Tensor merge_heads(const at::Tensor& out) const;
  // nn::Cost::workspace_bytes: the backward's temporaries beyond the saved state.
  double backward_workspace(int64_t batch, int64_t seq, int64_t dtype_bytes) const;

  std::unique_ptr<parallel::AttentionCore> core_;  // this layout's attention (NOTE [Attention cores])
  int64_t local_heads_;  // n_heads / tp
  nn::AttentionKernel kernel_;  // NOTE [Attention kernels]
};

}  // namespace loom::blocks

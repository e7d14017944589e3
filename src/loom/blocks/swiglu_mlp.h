#pragma once
// Llama's pre-norm MLP sub-block: y = x + down(silu(gate(h)) * up(h)), h = rmsnorm(x), no biases;
// hidden = nn::swiglu_hidden(d_model, ffn_mult, ffn_multiple_of).
//
// Tensor parallelism over `tp`: gate and up are one column-parallel linear of two groups
// [gate | up], each split separately, so a rank holds gate and up of the same hidden units and
// SwiGLU runs on its slice (nn/swiglu.h); down is row-parallel. Communication: NOTE [Pre-norm
// sub-block].
#include "loom/blocks/pre_norm_block.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

class SwiGluMlpBlock final : public PreNormBlock {
 public:
  SwiGluMlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std,
                 dist::Communicator& tp, parallel::TpOptions options = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  parallel::ColumnParallelLinear gate_up;  // d_model -> [gate | up], each hidden
  parallel::RowParallelLinear down;        // hidden -> d_model

 private:
  PreNormState& emplace_state(nn::Saved& saved) const override;
  at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) override;
  at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) override;
  // h -> down's partial output; u (up's output) and a (the activation, down's input) for backward.
  at::Tensor apply(const at::Tensor& h, at::Tensor& u, at::Tensor& a) const;
  at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) override;
  void finish_backward(PreNormState& s) const override;
  void weight_gradients(PreNormState& s) override;

  int64_t d_model_;
};

}  // namespace loom::blocks

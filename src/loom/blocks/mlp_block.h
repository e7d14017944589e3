#pragma once
// GPT's pre-norm MLP sub-block: y = x + down(gelu_tanh(up(ln(x)))), hidden = ffn_mult * d_model.
//
// Tensor parallelism over `tp` (a communicator of one rank for a serial model): up is
// column-parallel, down row-parallel, so GELU runs on each rank's hidden slice. Communication:
// NOTE [Pre-norm sub-block].
#include "loom/blocks/pre_norm_block.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

class MlpBlock final : public PreNormBlock {
 public:
  MlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std, dist::Communicator& tp,
           parallel::TpOptions options = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  parallel::ColumnParallelLinear up;  // d_model -> hidden
  parallel::RowParallelLinear down;   // hidden -> d_model

 private:
  PreNormState& emplace_state(nn::Saved& saved) const override;
  at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) override;
  void finish_forward(at::Tensor& y) const override { down.add_bias(y); }
  at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) override;
  // h -> down's partial output; u (up's output) and a (the activation, down's input) for backward.
  at::Tensor apply(const at::Tensor& h, at::Tensor& u, at::Tensor& a) const;
  at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) override;
  void finish_backward(PreNormState& s) const override;
  void weight_gradients(PreNormState& s) override;

  int64_t d_model_;
};

}  // namespace loom::blocks

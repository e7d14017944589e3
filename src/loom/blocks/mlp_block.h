#pragma once
// The pre-norm MLP sub-block of a decoder: y = x + down(act(up(norm(x)))), as the model kind
// shapes it (MlpShape):
//   GPT    LayerNorm, biases, GELU (tanh form): up is d_model -> hidden;
//   Llama  RMSNorm, no biases, SwiGLU: up is [gate | up], d_model -> 2 x hidden, and
//          act(u) = silu(gate) * up (nn/swiglu.h).
//
// Tensor parallelism over `tp` (a communicator of one rank for a serial model): up is
// column-parallel (SwiGLU's two groups split separately, so a rank holds gate and up of the same
// hidden units), down row-parallel, so the activation runs on each rank's hidden slice.
// Communication: NOTE [Pre-norm sub-block].
#include "loom/blocks/pre_norm_block.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

enum class MlpActivation { GeluTanh, SwiGlu };

struct MlpShape {
  int64_t d_model = 0;
  int64_t hidden = 0;  // the activation's output width (SwiGLU's up is twice that)
  MlpActivation activation = MlpActivation::GeluTanh;
  NormKind norm = NormKind::Layer;
  bool bias = true;            // on up and down
  double residual_std = 0.02;  // down's initialisation
};

class MlpBlock final : public PreNormBlock {
 public:
  // `prefix` names the parameters, e.g. "blocks.0.mlp" (up is ".up", or ".gate_up" under SwiGLU).
  MlpBlock(const std::string& prefix, const MlpShape& shape, dist::Communicator& tp, parallel::TpOptions options = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  parallel::ColumnParallelLinear up;  // d_model -> hidden, or [gate | up] of 2 x hidden
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

  MlpShape shape_;
};

}  // namespace loom::blocks

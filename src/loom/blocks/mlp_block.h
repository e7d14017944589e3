#pragma once
// Pre-norm MLP sub-block: y = x + down(gelu_tanh(up(ln(x)))), hidden = ffn_mult * d_model.
//
// Tensor parallelism over `tp` (a communicator of one rank for a serial model): up is
// column-parallel, down row-parallel, so GELU runs on each rank's hidden slice. Communication
// per call is the attention sub-block's (see attention_block.h): forward one all-reduce of y
// (down's output), backward_input one of dx (up's input gradient); under tp_sequence an
// all-gather of ln(x) and a reduce-scatter of y in forward, and all-gathers of dy and ln(x) and
// a reduce-scatter of dx in backward_input; tp_overlap cuts them into batch chunks.
#include "loom/nn/layer.h"
#include "loom/nn/layer_norm.h"
#include "loom/dist/communicator.h"
#include "loom/parallel/tensor_parallel_linear.h"
#include "loom/parallel/tp_region.h"

namespace loom::blocks {

class MlpBlock final : public nn::Layer {
 public:
  MlpBlock(const std::string& prefix, int64_t d_model, int64_t hidden, double residual_std, dist::Communicator& tp,
           parallel::TpOptions options = {});

  std::string name() const override { return prefix_; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

 private:
  dist::Communicator& tp_;
  int64_t chunks_;  // sub-pipelined TP chunks per micro-batch (1 = off)
  bool sequence_;   // tp_sequence on more than one rank

 public:
  nn::LayerNorm norm;
  parallel::ColumnParallelLinear up;  // d_model -> hidden
  parallel::RowParallelLinear down;   // hidden -> d_model

 private:
  std::string prefix_;
  int64_t d_model_, hidden_;
};

}  // namespace loom::blocks

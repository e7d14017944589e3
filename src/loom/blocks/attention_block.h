#pragma once
// Pre-norm causal self-attention sub-block: y = x + proj(attention(split_heads(qkv(ln(x))))).
// One chain layer, so a pipeline stage boundary may fall between it and the MLP sub-block.
//
// Tensor parallelism over `tp` (a communicator of one rank for a serial model): the heads are
// split, qkv is column-parallel (each rank holds q, k and v of its heads) and proj row-parallel.
// Communication per call (NOTE [Tensor-parallel regions]), x and y of [batch, seq, d_model]:
//   forward          all-reduce of y (proj's output)
//   backward_input   all-reduce of dx (qkv's input gradient)
//   backward_weight  none
// Under tp_sequence x, y, dy and dx hold seq/tp tokens and:
//   forward          all-gather of ln(x) (qkv's input); reduce-scatter of y
//   backward_input   all-gather of dy; reduce-scatter of dx; all-gather of ln(x) again, for
//                    qkv's weight gradient (saving the gathered one would undo the saving)
// With tp_overlap = k every collective except that last gather is k, one per batch chunk,
// overlapped with the next chunk's compute (NOTE [Sub-pipelined TP]).
// Under sequence parallelism (`sp`, sp_mode "allgather") x holds one segment of the sequence:
// forward all-gathers the segments' k and v in one collective (per chunk), backward_input
// gathers them again and reduce-scatters their gradients in one (NOTE [Sequence parallelism]).
#include "loom/nn/layer.h"
#include "loom/nn/layer_norm.h"
#include "loom/dist/communicator.h"
#include "loom/parallel/tensor_parallel_linear.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/parallel/tp_region.h"

namespace loom::blocks {

class AttentionBlock final : public nn::Layer {
 public:
  // `prefix` names the parameters, e.g. "blocks.0.attn"; `residual_std` initialises the output
  // projection (GPT-2 scales it by 1/sqrt(2 * n_layers)).
  AttentionBlock(const std::string& prefix, int64_t d_model, int64_t n_heads, int64_t tile, double residual_std,
                 dist::Communicator& tp, parallel::TpOptions options = {}, parallel::SpOptions sp = {});

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
  parallel::SpOptions sp_;  // sequence parallelism over segments (NOTE [Sequence parallelism])

 public:
  nn::LayerNorm norm;
  parallel::ColumnParallelLinear qkv;  // d_model -> 3 d_model as [q | k | v], each head-major
  parallel::RowParallelLinear proj;    // d_model -> d_model

 private:
  std::string prefix_;
  int64_t d_model_, local_heads_, tile_;  // local_heads_ = n_heads / tp
};

}  // namespace loom::blocks

#pragma once
// NOTE [Pre-norm sub-block]: every sub-block of a transformer block (GPT's and Llama's attention
// and MLP) is y = x + f(norm(x)), where f enters a tensor-parallel region through column-parallel
// linears and leaves it through a row-parallel one (NOTE [Tensor-parallel regions]). PreNormBlock
// is what they share: the norm (LayerNorm or RMSNorm), the region with its tp_overlap pieces, the
// residual, and keeping x, the normed input h and dy for the weight gradients. A sub-block
// supplies f: its forward on one piece of h, its input gradient on one piece of dy, and its
// weight gradients from h and dy of every token.
//
// Communication per call, x and y of [batch, seq, d_model] (a communicator of one rank for a
// serial model moves nothing):
//   forward          all-reduce of y (the row linear's output)
//   backward_input   all-reduce of dx (the column linears' input gradient)
//   backward_weight  none
// Under tp_sequence x, y, dy and dx hold seq/tp tokens and:
//   forward          all-gather of norm(x) (the column linears' input); reduce-scatter of y
//   backward_input   all-gather of dy; reduce-scatter of dx; all-gather of norm(x) again, for the
//                    column linears' weight gradients (saving the gathered one would undo the saving)
// With tp_overlap = k every collective except that last gather is k, one per batch piece,
// overlapped with the next piece's compute (NOTE [Sub-pipelined TP]). f may add its own: an
// attention core's over sp (NOTE [Attention cores]).
// Decoding (NOTE [Decoding]) runs the same y = x + f(norm(x)) on a serial block, f on the new
// tokens only: the sub-block's decode_piece.
#include "loom/blocks/block_norm.h"
#include "loom/dist/communicator.h"
#include "loom/nn/decode.h"
#include "loom/nn/layer.h"
#include "loom/parallel/tp_region.h"

namespace loom::blocks {

// The skeleton's part of a sub-block's saved state. Each sub-block derives its own and lists its
// tensors together with these (for_each_tensor stays pure, so none can forget its own).
struct PreNormState : nn::SavedState {
  NormState norm;  // x and its statistics; the norm's parameter gradients after backward_input
  at::Tensor h;    // normed input (this rank's tokens under tp_sequence, until backward_input
                   // gathers every token again for the weight gradients)
  at::Tensor dy;   // of every token of the region, for the row linear's weight gradient
  double loss_scale = 1.0;  // the micro-batch's (a sub-block with a loss of its own scales it so)
  void for_each_skeleton_tensor(const nn::TensorVisitor& visit);
};

class PreNormBlock : public nn::Layer, public nn::Decodable {
 public:
  std::string name() const override { return prefix_; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) final;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) final;
  void backward_weight(nn::Saved& saved) final;
  at::Tensor decode(const at::Tensor& x, int64_t position, nn::DecodeCache& cache) final;

  BlockNorm norm;  // named prefix + ".norm"

 protected:
  // Batch piece `index` of `count` (tp_overlap): rows [first, first + rows) of the micro-batch.
  struct Piece {
    int64_t index, count, first, rows;
  };

  PreNormBlock(const std::string& prefix, NormKind norm_kind, int64_t d_model, dist::Communicator& tp,
               parallel::TpOptions options);

  virtual PreNormState& emplace_state(nn::Saved& saved) const = 0;
  // h [rows, seq, d_model] of one piece, every token of the region -> this rank's term of the
  // row linear's output (the region sums it over tp).
  virtual at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) = 0;
  // y after the sum over tp, before the residual: the row linear's bias, if any.
  virtual void finish_forward(at::Tensor& /*y*/) const {}
  // dy of one piece -> this rank's term of dh (the column linears' input gradient).
  virtual at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) = 0;
  // f on h [B, T, d_model] of positions [position, position + T) of a serial block, before
  // finish_forward (NOTE [Decoding]).
  virtual at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) = 0;
  // Frees what only backward_input needed, once every piece is done.
  virtual void finish_backward(PreNormState& s) const = 0;
  // The linears' weight gradients from s.h and s.dy (every token).
  virtual void weight_gradients(PreNormState& s) = 0;

  // Elements the skeleton keeps from forward for `batch` x `seq` tokens of the region: x and the
  // norm's statistics, and h (this rank's share of the tokens under tp_sequence).
  int64_t skeleton_saved_elements(int64_t batch, int64_t seq) const;
  // The skeleton's part of a cost: the region's tp collectives (an all-reduce each way; under
  // tp_sequence an all-gather and a reduce-scatter forward, and backward the gradient's and h's
  // all-gathers and a reduce-scatter) and the norm's and residual's elementwise bytes.
  void add_skeleton_costs(nn::Cost& c, int64_t batch, int64_t seq, int64_t dtype_bytes) const;

  dist::Communicator& tp_;

 private:
  std::string prefix_;
  int64_t pieces_;  // tp_overlap pieces per micro-batch (1 = off)
  bool sequence_;   // tp_sequence on more than one rank
  int64_t d_model_;
};

}  // namespace loom::blocks

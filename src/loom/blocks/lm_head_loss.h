#pragma once
// LM head fused with cross-entropy: loss = loss_scale * sum_t (logsumexp(z_t) - z_t[target_t]),
// z = x W^T (untied, no bias). Forward computes the loss and the logits' gradient
// (softmax - onehot); only that gradient is kept (the loss scale is applied in backward's GEMMs).
// With tp = 1 the fused log-softmax is out of place, so the logits and the log-probabilities
// coexist for a moment (twice [rows, vocab] at the peak); with tp > 1 the slice is transformed
// in place. The chain's last layer: forward returns the 0-d loss, and
// backward_input ignores dy (the loss is the root of backward).
//
// Vocabulary-parallel over `tp` (NOTE [Vocabulary padding]): each rank holds a slice of the
// head's rows and computes its slice of the logits; the full logits are never gathered. The
// softmax statistics travel instead: forward all-reduces the row maxima (max) and then the
// exp-sums with the target logits (one sum of [2, rows]); backward_input all-reduces dx
// ([rows, d_model], sum). With tp = 1 the fused log-softmax path runs and nothing travels.
// Under tp_sequence (`sequence_sharded`) x and dx hold this rank's seq/tp tokens: forward first
// all-gathers x along seq, and backward_input reduce-scatters dx instead of all-reducing it.
//
// Tied (`tied` given: a Llama's model.tie_embeddings) the head's matrix is the embedding's token
// table, the same Param: the head reads its value and adds its gradient to the table's, and
// lists no parameter of its own (the embedding owns it, so it is updated once). Both layers must
// then live on one pipeline rank, and the table must be dense (never on the sparse path: the
// head reads every row).
//
// Untied, its matrix is sliceable: under ZeRO-3 its products run a slice of rows at a time
// (NOTE [Sliced reads]), so the whole matrix is never gathered.
//
// Decoding (NOTE [Decoding], serial) returns the logits instead of the loss: `logits`, the
// product the loss is computed from, so generation and training cannot disagree.
#include "loom/dist/communicator.h"
#include "loom/nn/decode.h"
#include "loom/nn/layer.h"

namespace loom::blocks {

class LmHeadLoss final : public nn::Layer, public nn::Decodable {
 public:
  LmHeadLoss(int64_t d_model, int64_t vocab, dist::Communicator& tp, bool sequence_sharded = false,
             nn::Param* tied = nullptr);

  std::string name() const override { return "head_loss"; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override;
  std::vector<nn::Param*> reads() override { return {&matrix()}; }
  at::Tensor decode(const at::Tensor& x, int64_t position, nn::DecodeCache& cache) override;
  // The logits of this rank's vocabulary slice for x [rows, d_model]: [rows, vocab / tp], in
  // float32 or wider (NOTE [Mixed precision]); padding columns as the product gives them.
  at::Tensor logits(const at::Tensor& x);
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  nn::Param weight;  // [padded vocab, d_model], rows split over tp; no bias; unnamed when tied

 private:
  nn::Param& matrix() { return tied_ != nullptr ? *tied_ : weight; }
  at::Tensor input_gradient(const at::Tensor& dlogits);  // dlogits W, without the loss scale
  at::Tensor distributed_forward(const at::Tensor& x, const at::Tensor& targets, double scale, at::Tensor& dlogits);
  dist::Communicator& tp_;
  nn::Param* tied_;  // the embedding's token table, or null
  bool sequence_;
  int64_t d_model_, vocab_, first_row_, rows_;
};

}  // namespace loom::blocks

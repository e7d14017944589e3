#pragma once
// Token + learned position embedding: y[b, t] = wte[tokens[b, t]] + wpe[t]; with no position
// table (positions = 0: a Llama, whose positions are rotary, in attention) y = wte[tokens]. The
// chain's first layer: its input is the token ids, so backward_input returns an undefined tensor.
//
// Vocabulary-parallel over `tp`: the token table's rows are split (see padded_vocab); each rank
// looks up the ids it owns, zeros for the others, and one all-reduce of [batch, seq, d_model] in
// forward sums the parts. The position table is replicated. Backward communicates nothing.
// Under tp_sequence (`sequence_sharded`) the output holds this rank's seq/tp tokens: forward
// reduce-scatters the parts along seq instead, adds the positions of those tokens (so the
// position table's gradient is partial over tp), and backward_input all-gathers dy, which the
// token table's gradient needs for every token.
// On the sparse path (token_table.sparse, NOTE [Sparse exchange]) the rows come from the pulled
// block and the gradient rows go back to it; the table itself is never dense on a rank.
// Decoding (NOTE [Decoding], serial, dense table): the new tokens' rows plus the position rows
// from `position` on.
#include <optional>

#include "loom/dist/communicator.h"
#include "loom/nn/decode.h"
#include "loom/nn/layer.h"

namespace loom::blocks {

// NOTE [Vocabulary padding]: a vocabulary split over tp ranks is padded up to a multiple of tp.
// Padding rows exist in the token table and the head but never matter: no id refers to them
// (data ids are checked < vocab), and the head sets their logits to -inf, so their softmax
// probability and every gradient they would receive are exactly zero. They start at zero (so
// weight decay keeps them zero, and a checkpoint, which holds only the vocabulary's rows, restores
// them exactly: Param::padding_rows), and the real rows keep their serial values (the generator
// indexes elements of the full tensor, and rows < vocab have the same indices with or without
// padding).
int64_t padded_vocab(int64_t vocab, int tp);

class TokenPositionEmbedding final : public nn::Layer, public nn::Decodable {
 public:
  // `chunks`: under sequence parallelism the tokens are these equal chunks of the sequence, in
  // order (e.g. {r} for segment r of sp; {r, 2 sp - 1 - r} for the balanced ring), so their
  // positions are those chunks'. `positions` = 0: no position table.
  // `activations`: the type of the output (NOTE [Mixed precision]); nullopt = the tables' own.
  TokenPositionEmbedding(int64_t vocab, int64_t positions, int64_t d_model, dist::Communicator& tp,
                         bool sequence_sharded = false, std::vector<int64_t> chunks = {0},
                         std::optional<at::ScalarType> activations = std::nullopt);

  std::string name() const override { return "embedding"; }
  at::Tensor forward(const at::Tensor& tokens, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override;
  void pull_rows(const std::vector<nn::MicroBatch>& microbatches) override;
  at::Tensor decode(const at::Tensor& tokens, int64_t position, nn::DecodeCache& cache) override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  nn::Param token_table;     // wte [padded vocab, d_model], rows split over tp
  nn::Param position_table;  // wpe [positions, d_model]; unnamed when there is none

 private:
  dist::Communicator& tp_;
  // The position of each of `local` tokens starting at token `first` of this rank's `seq` tokens.
  at::Tensor positions(int64_t seq, int64_t first, int64_t local, at::Device device) const;
  // Their rows of the position table: a view when the tokens are one chunk.
  at::Tensor position_rows(int64_t seq, int64_t first, int64_t local) const;
  // This rank's rows of `ids` (with tp: ids it owns, local; -1 for others') for the sparse path.
  at::Tensor local_rows(const at::Tensor& ids) const;
  bool sequence_;
  std::vector<int64_t> chunks_;
  int64_t d_model_, first_row_, rows_;  // the token rows this rank owns
  std::optional<at::ScalarType> activations_;
};

}  // namespace loom::blocks

#include "loom/blocks/embedding.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/nn/precision.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/parallel/tp_region.h"

namespace loom::blocks {
namespace {
struct EmbeddingState : nn::SavedState {
  at::Tensor tokens, dy;  // dy of every token
  at::Tensor dy_local;    // dy of this rank's tokens (tp_sequence)
  at::Tensor mine;  // [batch * seq] bool: ids in this rank's rows (tp > 1)
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    visit("tokens", tokens), visit("dy", dy), visit("dy_local", dy_local), visit("mine", mine);
  }
};
}  // namespace

int64_t padded_vocab(int64_t vocab, int tp) { return (vocab + tp - 1) / tp * tp; }

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t positions, int64_t d_model,
                                               dist::Communicator& tp, bool sequence_sharded, std::vector<int64_t> chunks,
                                               std::optional<at::ScalarType> activations)
    : tp_(tp),
      sequence_(tp.size() > 1 && sequence_sharded),
      chunks_(std::move(chunks)),
      d_model_(d_model),
      activations_(activations) {
  const int64_t padded = padded_vocab(vocab, tp.size());
  rows_ = padded / tp.size();
  first_row_ = rows_ * tp.rank();
  token_table = nn::Param{.name = "embedding.wte", .full_shape = {padded, d_model}, .padding_rows = padded - vocab,
                          .placements = {AxisPlacement::sharded("tp", 0, tp.rank(), tp.size())},
                      .init = nn::Init::Normal, .init_std = 0.02, .weight_decay = true, .embedding = true};
  if (positions > 0)
    position_table = nn::Param{.name = "embedding.wpe", .full_shape = {positions, d_model},
                               .placements = nn::tp_sequence_placements(sequence_), .init = nn::Init::Normal,
                               .init_std = 0.01, .weight_decay = true};
}

std::vector<nn::Param*> TokenPositionEmbedding::params() {
  if (position_table.name.empty()) return {&token_table};
  return {&token_table, &position_table};
}

// On the table's device: its lookups and its gradient's index_add_ take the index there (the
// gradient's device, since a weight gradient never reads the value: NOTE [Sharded parameters]).
at::Tensor TokenPositionEmbedding::positions(int64_t seq, int64_t first, int64_t local, at::Device device) const {
  return parallel::chunk_positions(chunks_, seq).narrow(0, first, local).to(device);
}

at::Tensor TokenPositionEmbedding::position_rows(int64_t seq, int64_t first, int64_t local) const {
  const at::Tensor& table = nn::compute_value(position_table);
  if (chunks_.size() == 1) return table.narrow(0, chunks_[0] * seq + first, local);
  return table.index_select(0, positions(seq, first, local, table.device()));
}

at::Tensor TokenPositionEmbedding::local_rows(const at::Tensor& ids) const {
  if (tp_.size() == 1) return ids;
  const at::Tensor mine = (ids >= first_row_).logical_and_(ids < first_row_ + rows_);
  return at::where(mine, ids - first_row_, at::full({}, -1, ids.options()));
}

void TokenPositionEmbedding::pull_rows(const std::vector<nn::MicroBatch>& microbatches) {
  if (token_table.sparse == nullptr) return;
  std::vector<at::Tensor> ids;
  for (const nn::MicroBatch& mb : microbatches) ids.push_back(local_rows(mb.tokens.reshape({-1})));
  token_table.sparse->pull(ids.empty() ? at::empty({0}, at::kLong) : at::cat(ids));
}

at::Tensor TokenPositionEmbedding::forward(const at::Tensor& tokens, const nn::MicroBatch&, nn::Saved& saved) {
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  auto& s = saved.emplace<EmbeddingState>();
  s.tokens = tokens;
  at::Tensor ids = tokens.reshape({-1});
  at::Tensor rows;
  if (token_table.sparse != nullptr) {
    rows = token_table.sparse->lookup(local_rows(ids));  // zeros for other tp ranks' ids
  } else {
    if (tp_.size() > 1) {
      s.mine = (ids >= first_row_).logical_and_(ids < first_row_ + rows_);
      ids = (ids - first_row_).mul_(s.mine);  // ids of other ranks read row 0, then are zeroed
    }
    rows = nn::compute_value(token_table).index_select(0, ids);
    if (tp_.size() > 1) rows.mul_(s.mine.unsqueeze(1));
  }
  if (activations_) rows = nn::to_type(rows, *activations_);
  const bool learned = !position_table.name.empty();
  if (!sequence_) {
    if (tp_.size() > 1) tp_.all_reduce(rows, dist::ReduceOp::Sum);
    return learned ? rows.view({batch, seq, d_model_}) + position_rows(seq, 0, seq) : rows.view({batch, seq, d_model_});
  }
  const at::Tensor mine = parallel::reduce_scatter_sequence(tp_, rows.view({batch, seq, d_model_}));
  const int64_t local = mine.size(1);
  return learned ? mine + position_rows(seq, tp_.rank() * local, local) : mine;
}

at::Tensor TokenPositionEmbedding::decode(const at::Tensor& tokens, int64_t position, nn::DecodeCache&) {
  LOOM_CHECK(tp_.size() == 1 && token_table.sparse == nullptr && chunks_ == std::vector<int64_t>{0},
             "[decode] the embedding decodes on one rank, with a dense table and whole sequences");
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  at::Tensor rows = nn::compute_value(token_table).index_select(0, tokens.reshape({-1}));
  if (activations_) rows = nn::to_type(rows, *activations_);
  rows = rows.view({batch, seq, d_model_});
  return position_table.name.empty() ? rows : rows + position_rows(position + seq, position, seq);
}

at::Tensor TokenPositionEmbedding::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<EmbeddingState>();
  s.dy_local = dy;
  s.dy = sequence_ ? parallel::gather_sequence(tp_, dy) : dy;
  return {};
}

void TokenPositionEmbedding::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<EmbeddingState>();
  const at::Tensor dy = s.dy.reshape({-1, d_model_});
  if (token_table.sparse != nullptr) {
    token_table.sparse->accumulate(local_rows(s.tokens.reshape({-1})), nn::widen(dy));  // master rows
  } else if (tp_.size() > 1) {
    const at::Tensor ids = (s.tokens.reshape({-1}) - first_row_).mul_(s.mine);
    nn::index_add_into(token_table.grad, 0, ids, dy * s.mine.unsqueeze(1));
  } else {
    nn::index_add_into(token_table.grad, 0, s.tokens.reshape({-1}), dy);
  }
  const int64_t local = s.dy_local.size(1);
  if (!position_table.name.empty())
    position_table.grad.index_add_(0, positions(s.tokens.size(1), sequence_ ? tp_.rank() * local : 0, local,
                                                position_table.grad.device()),
                                   at::sum(s.dy_local, {0}, false, position_table.grad.scalar_type()));
  saved.clear();
}

nn::Cost TokenPositionEmbedding::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  nn::Cost c;
  // The token ids, and with tp the mask of this rank's (on the sparse path the mask is not kept).
  c.saved_bytes = static_cast<double>(batch * seq) * (tp_.size() > 1 ? 9 : 8);
  const int64_t positions = position_table.name.empty() ? 0 : position_table.full_shape[0];
  c.param_bytes = static_cast<double>((rows_ + positions) * d_model_ * dtype_bytes);
  c.elementwise_bytes = static_cast<double>(3 * batch * seq * d_model_ * dtype_bytes);  // rows gathered, positions added
  if (tp_.size() > 1)  // each rank's rows summed (scattered under tp_sequence) over tp
    c.comm.push_back({.op = sequence_ ? nn::CommOp::ReduceScatter : nn::CommOp::AllReduce,
                      .bytes = static_cast<double>(batch * seq * d_model_ * dtype_bytes)});
  return c;
}

}  // namespace loom::blocks

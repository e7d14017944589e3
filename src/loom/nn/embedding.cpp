#include "loom/nn/embedding.h"

namespace loom::nn {
namespace {
struct State : SavedState {
  at::Tensor tokens, dy;
  at::Tensor mine;  // [batch * seq] bool: ids in this rank's rows (tp > 1)
};
}  // namespace

int64_t padded_vocab(int64_t vocab, int tp) { return (vocab + tp - 1) / tp * tp; }

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t positions, int64_t d_model,
                                               dist::Communicator& tp)
    : tp_(tp), d_model_(d_model) {
  const int64_t padded = padded_vocab(vocab, tp.size());
  rows_ = padded / tp.size();
  first_row_ = rows_ * tp.rank();
  token_table = Param{.name = "embedding.wte", .full_shape = {padded, d_model}, .shard = {0, first_row_, rows_},
                      .init = Init::Normal, .init_std = 0.02, .weight_decay = true};
  position_table = Param{.name = "embedding.wpe", .full_shape = {positions, d_model}, .init = Init::Normal,
                         .init_std = 0.01, .weight_decay = true};
}

at::Tensor TokenPositionEmbedding::forward(const at::Tensor& tokens, const MicroBatch&, Saved& saved) {
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  auto& s = saved.emplace<State>();
  s.tokens = tokens;
  at::Tensor ids = tokens.reshape({-1});
  if (tp_.size() > 1) {
    s.mine = (ids >= first_row_).logical_and_(ids < first_row_ + rows_);
    ids = (ids - first_row_).mul_(s.mine);  // ids of other ranks read row 0, then are zeroed
  }
  at::Tensor rows = token_table.value.index_select(0, ids);
  if (tp_.size() > 1) {
    rows.mul_(s.mine.unsqueeze(1));
    tp_.all_reduce(rows, dist::ReduceOp::Sum);
  }
  return rows.view({batch, seq, d_model_}) + position_table.value.narrow(0, 0, seq);
}

at::Tensor TokenPositionEmbedding::backward_input(const at::Tensor& dy, Saved& saved) {
  saved.get<State>().dy = dy;
  return {};
}

void TokenPositionEmbedding::backward_weight(Saved& saved) {
  auto& s = saved.get<State>();
  const int64_t seq = s.tokens.size(1);
  const at::Tensor dy = s.dy.reshape({-1, d_model_});
  if (tp_.size() > 1) {
    const at::Tensor ids = (s.tokens.reshape({-1}) - first_row_).mul_(s.mine);
    token_table.grad.index_add_(0, ids, dy * s.mine.unsqueeze(1));
  } else {
    token_table.grad.index_add_(0, s.tokens.reshape({-1}), dy);
  }
  position_table.grad.narrow(0, 0, seq).add_(s.dy.sum(0));
  saved.clear();
}

Cost TokenPositionEmbedding::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  Cost c;
  c.saved_bytes = static_cast<double>(batch * seq) * 8;
  c.param_bytes = static_cast<double>((rows_ + position_table.full_shape[0]) * d_model_ * dtype_bytes);
  return c;
}

}  // namespace loom::nn

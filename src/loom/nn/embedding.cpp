#include "loom/nn/embedding.h"

namespace loom::nn {
namespace {
struct State : SavedState {
  at::Tensor tokens, dy;
};
}  // namespace

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t positions, int64_t d_model)
    : d_model_(d_model) {
  token_table = Param{.name = "embedding.wte", .full_shape = {vocab, d_model}, .init = Init::Normal,
                      .init_std = 0.02, .weight_decay = true};
  position_table = Param{.name = "embedding.wpe", .full_shape = {positions, d_model}, .init = Init::Normal,
                         .init_std = 0.01, .weight_decay = true};
}

at::Tensor TokenPositionEmbedding::forward(const at::Tensor& tokens, const MicroBatch&, Saved& saved) {
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  saved.emplace<State>().tokens = tokens;
  return token_table.value.index_select(0, tokens.reshape({-1})).view({batch, seq, d_model_}) +
         position_table.value.narrow(0, 0, seq);
}

at::Tensor TokenPositionEmbedding::backward_input(const at::Tensor& dy, Saved& saved) {
  saved.get<State>().dy = dy;
  return {};
}

void TokenPositionEmbedding::backward_weight(Saved& saved) {
  auto& s = saved.get<State>();
  const int64_t seq = s.tokens.size(1);
  token_table.grad.index_add_(0, s.tokens.reshape({-1}), s.dy.reshape({-1, d_model_}));
  position_table.grad.narrow(0, 0, seq).add_(s.dy.sum(0));
  saved.clear();
}

Cost TokenPositionEmbedding::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  Cost c;
  c.saved_bytes = static_cast<double>(batch * seq) * 8;
  c.param_bytes = static_cast<double>((token_table.full_shape[0] + position_table.full_shape[0]) * d_model_ *
                                      dtype_bytes);
  return c;
}

}  // namespace loom::nn

#include "loom/blocks/pre_norm_block.h"

#include <optional>

#include "loom/core/error.h"

namespace loom::blocks {

void PreNormState::for_each_skeleton_tensor(const nn::TensorVisitor& visit) {
  norm.for_each_tensor(visit);
  visit("h", h), visit("dy", dy);
}

PreNormBlock::PreNormBlock(const std::string& prefix, NormKind norm_kind, int64_t d_model, dist::Communicator& tp,
                           parallel::TpOptions options)
    : norm(norm_kind, prefix + ".norm", d_model, tp.size() > 1 && options.sequence),
      tp_(tp),
      prefix_(prefix),
      pieces_(tp.size() > 1 ? options.overlap : 1),
      sequence_(tp.size() > 1 && options.sequence),
      d_model_(d_model) {}

at::Tensor PreNormBlock::forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) {
  PreNormState& s = emplace_state(saved);
  s.loss_scale = mb.loss_scale;
  s.h = norm.forward(x, s.norm);
  parallel::TpRegion region(tp_, sequence_);
  region.enter_chunks(s.h, pieces_);
  for (int64_t c = 0; c < pieces_; ++c) {
    const auto [first, rows] = parallel::chunk_rows(x.size(0), pieces_, c);
    region.leave(forward_piece(region.next_entered(), {c, pieces_, first, rows}, s));  // reduced while the next piece computes
  }
  at::Tensor y = region.finish();
  finish_forward(y);
  return y.add_(x);
}

at::Tensor PreNormBlock::decode(const at::Tensor& x, int64_t position, nn::DecodeCache& cache) {
  LOOM_CHECK(tp_.size() == 1, "[decode] {} decodes on one rank, not over tp = {}", prefix_, tp_.size());
  NormState norm_state;
  at::Tensor y = decode_piece(norm.forward(x, norm_state), position, cache);
  finish_forward(y);
  return y.add_(x);
}

at::Tensor PreNormBlock::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<PreNormState>();
  std::optional<parallel::PendingSequenceGather> h_full;
  if (sequence_) h_full.emplace(tp_, s.h);  // travels while backward computes
  parallel::TpRegion region(tp_, sequence_);
  region.enter_chunks(dy, pieces_);
  for (int64_t c = 0; c < pieces_; ++c) {
    const auto [first, rows] = parallel::chunk_rows(dy.size(0), pieces_, c);
    const at::Tensor dy_piece = region.next_entered();  // [rows, seq, d_model]
    parallel::store_chunk(s.dy, dy_piece, 0, first, pieces_);
    region.leave(backward_piece(dy_piece, {c, pieces_, first, rows}, s));  // reduced while the next piece computes
  }
  const at::Tensor dh = region.finish();
  finish_backward(s);
  at::Tensor dx = norm.backward(dh, s.norm);
  if (h_full) s.h = h_full->wait();
  return dx.add_(dy);  // the residual branch
}

void PreNormBlock::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<PreNormState>();
  weight_gradients(s);
  norm.accumulate(s.norm);
  saved.clear();
}

int64_t PreNormBlock::skeleton_saved_elements(int64_t batch, int64_t seq) const {
  const int64_t rows = sequence_ ? batch * seq / tp_.size() : batch * seq;
  return norm.saved_elements(rows) + rows * d_model_;
}

void PreNormBlock::add_skeleton_costs(nn::Cost& c, int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = sequence_ ? batch * seq / tp_.size() : batch * seq;
  c.elementwise_bytes += static_cast<double>(5 * rows * d_model_ * dtype_bytes);  // norm in/out; x + y -> out
  if (tp_.size() <= 1) return;
  const double full = static_cast<double>(batch * seq * d_model_ * dtype_bytes);
  const bool overlapped = pieces_ > 1;
  using nn::CommOp, nn::CommPass;
  auto use = [&](CommOp op, CommPass pass) {
    c.comm.push_back({.op = op, .axis = nn::CommAxis::Tp, .pass = pass, .bytes = full, .overlapped = overlapped});
  };
  if (!sequence_) {
    use(CommOp::AllReduce, CommPass::Forward);
    use(CommOp::AllReduce, CommPass::BackwardInput);
    return;
  }
  use(CommOp::AllGather, CommPass::Forward);
  use(CommOp::ReduceScatter, CommPass::Forward);
  use(CommOp::AllGather, CommPass::BackwardInput);
  use(CommOp::AllGather, CommPass::BackwardInput);
  use(CommOp::ReduceScatter, CommPass::BackwardInput);
}

}  // namespace loom::blocks

#include "loom/blocks/lm_head_loss.h"

#include <algorithm>
#include <limits>

#include "loom/blocks/embedding.h"
#include "loom/core/error.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/parallel/tp_region.h"

namespace loom::blocks {
namespace {
struct LossHeadState : nn::SavedState {
  at::Tensor x;        // [rows, d_model], every token
  std::vector<int64_t> shape;  // [batch, seq, d_model] of every token
  at::Tensor dlogits;  // [rows, vocab]: softmax - onehot, without the loss scale
  double scale = 1.0;
  void for_each_tensor(const nn::TensorVisitor& visit) override { visit("x", x), visit("dlogits", dlogits); }
};
}  // namespace

LmHeadLoss::LmHeadLoss(int64_t d_model, int64_t vocab, dist::Communicator& tp, bool sequence_sharded, nn::Param* tied)
    : tp_(tp), tied_(tied), sequence_(tp.size() > 1 && sequence_sharded), d_model_(d_model), vocab_(vocab) {
  const int64_t padded = padded_vocab(vocab, tp.size());
  rows_ = padded / tp.size();
  first_row_ = rows_ * tp.rank();
  const nn::Param head{.name = "head.weight", .full_shape = {padded, d_model}, .padding_rows = padded - vocab,
                       .placements = {AxisPlacement::sharded("tp", 0, tp.rank(), tp.size())},
                       .init = nn::Init::Normal, .init_std = 0.02, .weight_decay = true};
  if (tied == nullptr) {
    weight = head;
    weight.sliceable = true;  // its products separate by rows (NOTE [Sliced reads])
    return;
  }
  LOOM_CHECK(tied->full_shape == head.full_shape && tied->placements == head.placements && !tied->embedding,
             "[head] a tied head needs a dense token table of its shape and vocabulary shard");
}

std::vector<nn::Param*> LmHeadLoss::params() {
  if (tied_ != nullptr) return {};
  return {&weight};
}

at::Tensor LmHeadLoss::logits(const at::Tensor& x) {
  nn::Param& w = matrix();
  if (w.slices == nullptr) return nn::product_wide(x, nn::compute_value(w).t(), w.products);
  const nn::RowSlices cut(rows_);
  at::Tensor z = at::empty({x.size(0), rows_}, x.options());
  for (int64_t k = 0; k < cut.count(); ++k)
    nn::matmul_into(z.narrow(1, cut.begin(k), cut.length(k)), x, w.slices->value(w, k).t(), w.products);
  return nn::widen(z);
}

// dlogits W over the rows of W, a slice at a time when it comes in slices (NOTE [Sliced reads]).
at::Tensor LmHeadLoss::input_gradient(const at::Tensor& dlogits) {
  nn::Param& w = matrix();
  if (w.slices == nullptr) return nn::matmul(dlogits, nn::compute_value(w), w.products);
  // Summed in float32 or wider: the slices' products are rounded once each, the sum once at the end.
  const nn::RowSlices cut(rows_);
  at::Tensor dx = at::zeros({dlogits.size(0), d_model_}, dlogits.options().dtype(nn::wide_type(dlogits.scalar_type())));
  for (int64_t k = 0; k < cut.count(); ++k)
    nn::add_product(dx, dlogits.narrow(1, cut.begin(k), cut.length(k)), w.slices->value(w, k), w.products);
  return nn::to_type(dx, dlogits.scalar_type());
}

at::Tensor LmHeadLoss::decode(const at::Tensor& x, int64_t, nn::DecodeCache&) {
  LOOM_CHECK(tp_.size() == 1, "[decode] the head decodes on one rank, not over tp = {}", tp_.size());
  return logits(x.reshape({-1, d_model_})).view({x.size(0), x.size(1), vocab_});
}

// loss_i = lse_i - z_i[t_i] with lse over every rank's slice; dlogits = softmax - onehot.
at::Tensor LmHeadLoss::distributed_forward(const at::Tensor& x, const at::Tensor& targets, double scale,
                                           at::Tensor& dlogits) {
  at::Tensor z = logits(x);  // [rows, vocab / tp]
  const int64_t real = std::clamp<int64_t>(vocab_ - first_row_, 0, rows_);  // this slice's non-padding columns
  if (real < rows_) z.narrow(1, real, rows_ - real).fill_(-std::numeric_limits<double>::infinity());
  at::Tensor row_max = z.amax(1, /*keepdim=*/true);
  tp_.all_reduce(row_max, dist::ReduceOp::Max);
  const at::Tensor local = targets - first_row_;
  const at::Tensor mine = (local >= 0).logical_and_(local < rows_);
  const at::Tensor index = local.clamp(0, rows_ - 1).unsqueeze(1);
  // [2, rows]: this slice's exp-sum and, where the target is in this slice, z_t - max (else 0).
  at::Tensor stats = at::empty({2, z.size(0)}, z.options());
  at::Tensor exp_sum = stats[0], target = stats[1];
  at::where_out(target, mine, (z.gather(1, index) - row_max).squeeze(1), at::zeros({}, z.options()));
  z.sub_(row_max).exp_();
  at::sum_out(exp_sum, z, 1);
  tp_.all_reduce(stats, dist::ReduceOp::Sum);
  const at::Tensor log_sum = stats[0].log();
  const at::Tensor loss = (log_sum - stats[1]).sum().mul_(scale);
  z.div_(stats[0].unsqueeze(1));  // softmax over the full vocabulary
  z.scatter_add_(1, index, (-mine.to(z.scalar_type())).unsqueeze(1));
  dlogits = nn::to_type(z, x.scalar_type());
  return loss;
}

at::Tensor LmHeadLoss::forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) {
  auto& s = saved.emplace<LossHeadState>();
  const at::Tensor full = sequence_ ? parallel::gather_sequence(tp_, x) : x;
  s.x = full.reshape({-1, d_model_});
  s.shape = full.sizes().vec();
  const at::Tensor targets = mb.targets.reshape({-1, 1});
  // One fused pass for log-softmax, one for its exponent: fewer passes over the [rows, vocab]
  // logits than logsumexp + exp, and the loss scale is applied in the backward GEMMs instead of
  // another pass.
  if (tp_.size() > 1) {
    s.scale = mb.loss_scale;
    return distributed_forward(s.x, mb.targets.reshape({-1}), mb.loss_scale, s.dlogits);
  }
  // The logits' product in the activations' type, the softmax and the loss in float32 or wider
  // (NOTE [Mixed precision]); their gradient is kept in the activations' type for the products.
  at::Tensor logp = at::_log_softmax(logits(s.x), 1, false);
  const at::Tensor loss = logp.gather(1, targets).sum().mul_(-mb.loss_scale);
  logp.exp_().scatter_add_(1, targets, at::full({targets.size(0), 1}, -1.0, logp.options()));
  s.dlogits = nn::to_type(logp, s.x.scalar_type());
  s.scale = mb.loss_scale;
  return loss;
}

at::Tensor LmHeadLoss::backward_input(const at::Tensor&, nn::Saved& saved) {
  auto& s = saved.get<LossHeadState>();
  // dx = scale * dlogits W, summed over the vocabulary slices
  at::Tensor dx = input_gradient(s.dlogits).mul_(s.scale).view(s.shape);
  if (sequence_) return parallel::reduce_scatter_sequence(tp_, dx);
  tp_.all_reduce(dx, dist::ReduceOp::Sum);
  return dx;
}

void LmHeadLoss::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<LossHeadState>();
  nn::Param& w = matrix();
  if (w.slices == nullptr) {
    nn::add_product(w.grad, s.dlogits.t(), s.x, w.products, s.scale);
  } else {
    const nn::RowSlices cut(rows_);
    for (int64_t k = 0; k < cut.count(); ++k) {
      nn::add_product(w.slices->grad(w, k), s.dlogits.narrow(1, cut.begin(k), cut.length(k)).t(), s.x, w.products,
                      s.scale);
      w.slices->grad_done(w, k);
    }
  }
  saved.clear();
}

nn::Cost LmHeadLoss::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq;
  nn::Cost c;
  const double gemm = 2.0 * static_cast<double>(rows * rows_ * d_model_);
  c.forward_flops = gemm;
  c.backward_input_flops = gemm;
  c.backward_weight_flops = gemm;
  c.saved_bytes = static_cast<double>(rows * (rows_ + d_model_) * dtype_bytes);
  c.param_bytes = tied_ != nullptr ? 0.0 : static_cast<double>(rows_ * d_model_ * dtype_bytes);  // tied: the embedding's
  // The logits and their log-softmax side by side, both in float32 or wider, before the gradient
  // that is kept (saved above, in the activations' width) replaces them.
  const int64_t wide = std::max<int64_t>(dtype_bytes, 4);
  c.workspace_bytes = static_cast<double>(rows * rows_ * (2 * wide - dtype_bytes));
  c.gemm_dim = static_cast<double>(std::min({rows, rows_, d_model_}));
  // logits -> log-softmax -> gradient; a fused cross-entropy reads the logits once and writes the
  // gradient in their place (NOTE [Kernel fusion]).
  c.elementwise_bytes = static_cast<double>(3 * rows * rows_ * wide);
  c.fusable_bytes = static_cast<double>(rows * rows_ * wide);
  if (tp_.size() > 1) {  // the row maxima and the loss statistics; dx summed (or scattered) over tp
    using nn::CommOp, nn::CommPass;
    const double x = static_cast<double>(rows * d_model_ * dtype_bytes), stats = static_cast<double>(rows * 3 * 8);
    if (sequence_) c.comm.push_back({.op = CommOp::AllGather, .pass = CommPass::Forward, .bytes = x});
    c.comm.push_back({.op = CommOp::AllReduce, .pass = CommPass::Forward, .bytes = stats, .count = 2});
    c.comm.push_back({.op = sequence_ ? CommOp::ReduceScatter : CommOp::AllReduce, .pass = CommPass::BackwardInput,
                      .bytes = x});
  }
  return c;
}

}  // namespace loom::blocks

#include "loom/nn/moe_routing.h"

#include <cmath>

#include "loom/core/error.h"

namespace loom::nn {
namespace {

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// The token of each kept assignment, in `order`.
at::Tensor token_of(const Routing& r) { return r.order.div(r.top_k(), "floor"); }

// The backward of q = v / sum(v) along dim 1, for q's gradient g: (g - sum(g q)) / sum(v).
at::Tensor normalise_backward(const at::Tensor& g, const at::Tensor& q, const at::Tensor& sum) {
  return (g - (g * q).sum(1, /*keepdim=*/true)) / sum;
}

// Each assignment's place in its expert's queue over the whole micro-batch (NOTE [Experts over
// sequence parallelism]), and the micro-batch's sums. Assignments in priority order (slot-major,
// tokens in order) are grouped by (slot, cell, expert); a group's place starts after every
// assignment to its expert in an earlier (slot, cell), over every rank.
at::Tensor queue_positions(Routing& r, const TokenSpread& spread, int64_t experts) {
  const int64_t tokens = r.tokens(), k = r.top_k(), cells = spread.cells;
  const at::Tensor cell = spread.cell.defined() ? spread.cell : at::zeros({tokens}, r.expert.options());
  const at::Tensor slot = at::arange(k, r.expert.options()).repeat_interleave(tokens);
  const at::Tensor group = (slot * cells + cell.repeat({k})) * experts + r.expert.t().reshape({-1});
  const int64_t groups = k * cells * experts;
  const at::Tensor local = at::bincount(group, {}, groups);
  // One sum for the micro-batch: [groups] assignments, [E] normalised scores, 1 token count.
  const at::Tensor p = r.scores / r.scores.sum(1, true);
  at::Tensor sums = at::cat({local.to(at::kDouble), p.sum(0).to(at::kDouble),
                             at::full({1}, static_cast<double>(tokens), p.options().dtype(at::kDouble))});
  if (spread.sum) spread.sum(sums);
  const at::Tensor all = sums.narrow(0, 0, groups).to(at::kLong).view({k * cells, experts});
  r.batch_chosen = all.sum(0).to(r.scores.scalar_type());
  r.batch_score_sum = sums.narrow(0, groups, experts).to(r.scores.scalar_type());
  r.batch_tokens = static_cast<int64_t>(sums[groups + experts].item<double>());
  const at::Tensor base = (all.cumsum(0) - all).reshape({-1});  // exclusive, in (slot, cell) order
  // Within a group: a stable sort keeps token order; the place is the index past the group's start.
  const at::Tensor queued = std::get<1>(at::sort(group, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor starts = local.cumsum(0) - local;
  at::Tensor position = at::empty_like(group);
  position.index_copy_(0, queued, at::arange(group.numel(), group.options()) - starts.index_select(0, group.index_select(0, queued)));
  return position + base.index_select(0, group);
}

}  // namespace

int64_t expert_capacity(int64_t tokens, const RouterOptions& o) {
  if (o.capacity_factor <= 0) return tokens;
  const double c = std::ceil(o.capacity_factor * static_cast<double>(tokens * o.top_k) / static_cast<double>(o.experts));
  return static_cast<int64_t>(c);
}

Routing route(const at::Tensor& logits, const at::Tensor& bias, const RouterOptions& o, const TokenSpread& spread) {
  LOOM_CHECK(logits.dim() == 2 && logits.size(-1) == o.experts, "[moe] {}-d logits of width {} for {} experts",
             logits.dim(), logits.size(-1), o.experts);
  LOOM_CHECK(o.top_k >= 1 && o.top_k <= o.experts, "[moe] top_k {} of {} experts", o.top_k, o.experts);
  const int64_t tokens = logits.size(0), k = o.top_k, experts = o.experts;
  Routing r;
  const at::Tensor z = logits.to(at::promote_types(logits.scalar_type(), at::kFloat));
  r.scores = o.score == MoeScore::Softmax ? at::softmax(z, 1) : at::sigmoid(z);
  const at::Tensor steered = bias.defined() ? r.scores + bias.to(r.scores.options()) : r.scores;
  // A stable descending sort keeps equal scores in expert order: ties go to the lower index.
  r.expert = std::get<1>(at::sort(steered, /*stable=*/true, /*dim=*/1, /*descending=*/true)).narrow(1, 0, k).contiguous();
  const at::Tensor chosen = r.scores.gather(1, r.expert);
  r.weight = chosen / chosen.sum(1, /*keepdim=*/true);
  r.chosen = to_vector(at::bincount(r.expert.reshape({-1}), {}, experts));

  // Priority: slot-major (every token's first choice before any second one), tokens in order.
  const at::Tensor position = queue_positions(r, spread, experts);
  r.kept = (position < expert_capacity(r.batch_tokens, o)).view({k, tokens}).t().contiguous();

  // Expert-major order of the kept assignments t * k + j: a stable sort by expert, the dropped
  // ones keyed past the last expert and cut off.
  const at::Tensor key = at::where(r.kept, r.expert, at::full_like(r.expert, experts)).reshape({-1});
  const at::Tensor sorted = std::get<1>(at::sort(key, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const int64_t kept = r.kept.sum().item<int64_t>();
  r.order = sorted.narrow(0, 0, kept).contiguous();
  r.counts = to_vector(at::bincount(r.expert.reshape({-1}).index_select(0, r.order), {}, experts));
  r.dropped = tokens * k - kept;
  return r;
}

Routing restrict_tokens(const Routing& r, int64_t first, int64_t last) {
  const int64_t tokens = r.tokens(), experts = r.scores.size(1);
  LOOM_CHECK(0 <= first && first <= last && last <= tokens, "[moe] tokens [{}, {}) of {}", first, last, tokens);
  Routing out = r;
  const at::Tensor inside = at::zeros({tokens, 1}, r.kept.options());
  inside.narrow(0, first, last - first).fill_(true);
  out.kept = r.kept.logical_and(inside);
  const at::Tensor token = token_of(r);
  out.order = r.order.index_select(0, at::nonzero(token.ge(first).logical_and_(token.lt(last))).reshape({-1}));
  out.counts = to_vector(at::bincount(r.expert.reshape({-1}).index_select(0, out.order), {}, experts));
  out.chosen = to_vector(at::bincount(r.expert.narrow(0, first, last - first).reshape({-1}), {}, experts));
  out.dropped = (last - first) * r.top_k() - out.order.numel();
  return out;
}

at::Tensor permute(const at::Tensor& x, const Routing& r) { return x.index_select(0, token_of(r)); }

at::Tensor unpermute(const at::Tensor& rows, const Routing& r) {
  const int64_t tokens = r.tokens(), k = r.top_k();
  at::Tensor slots = at::zeros({tokens * k, rows.size(1)}, rows.options());
  slots.index_copy_(0, r.order, rows);
  const at::Tensor by_slot = slots.view({tokens, k, rows.size(1)});
  at::Tensor out = by_slot.select(1, 0).clone();
  for (int64_t j = 1; j < k; ++j) out.add_(by_slot.select(1, j));  // slot order: the same bits anywhere
  return out;
}

at::Tensor combine(const at::Tensor& rows, const Routing& r) {
  const at::Tensor w = r.weight.reshape({-1}).index_select(0, r.order).to(rows.scalar_type());
  return unpermute(rows * w.unsqueeze(1), r);
}

CombineGrads combine_backward(const at::Tensor& dy, const at::Tensor& rows, const Routing& r) {
  const at::Tensor dy_rows = dy.index_select(0, token_of(r));
  const at::Tensor w = r.weight.reshape({-1}).index_select(0, r.order);
  CombineGrads g;
  g.rows = dy_rows * w.to(dy.scalar_type()).unsqueeze(1);
  g.weight = at::zeros({r.tokens() * r.top_k()}, r.weight.options());
  g.weight.index_copy_(0, r.order, (dy_rows.to(w.scalar_type()) * rows.to(w.scalar_type())).sum(1));
  g.weight = g.weight.view({r.tokens(), r.top_k()});
  return g;
}

at::Tensor router_backward(const at::Tensor& dweight, const at::Tensor& dscores, const Routing& r,
                           const RouterOptions& o) {
  const at::Tensor chosen = r.scores.gather(1, r.expert);
  const at::Tensor dchosen = normalise_backward(dweight.to(r.scores.scalar_type()), r.weight, chosen.sum(1, true));
  at::Tensor ds = at::zeros_like(r.scores).scatter_(1, r.expert, dchosen);  // a token's k experts are distinct
  if (dscores.defined()) ds.add_(dscores);
  if (o.score == MoeScore::Softmax) return r.scores * (ds - (r.scores * ds).sum(1, true));
  return ds * r.scores * (1 - r.scores);
}

AuxLoss aux_loss(const Routing& r) {
  const double tokens = static_cast<double>(r.batch_tokens), experts = static_cast<double>(r.scores.size(1));
  const at::Tensor sum = r.scores.sum(1, true), p = r.scores / sum;
  const at::Tensor f = r.batch_chosen / (tokens * static_cast<double>(r.top_k()));
  AuxLoss out;
  out.value = experts * (f * r.batch_score_sum / tokens).sum().item<double>();
  // d/dp[t, i] = E f_i / T, the same for every token of the micro-batch; then back through p = s / sum(s).
  const at::Tensor g = (f * (experts / tokens)).unsqueeze(0).expand_as(p);
  out.dscores = normalise_backward(g, p, sum);
  return out;
}

void update_balance_bias(at::Tensor& bias, const std::vector<int64_t>& chosen, double rate) {
  LOOM_CHECK(bias.dim() == 1 && bias.size(0) == static_cast<int64_t>(chosen.size()),
             "[moe] a balance bias of {} for {} experts", bias.numel(), chosen.size());
  const int64_t experts = static_cast<int64_t>(chosen.size());
  int64_t total = 0;
  for (int64_t n : chosen) total += n;
  // sign(mean - n_i) = sign(total - E n_i): compared in integers, so no rounding decides it.
  std::vector<double> step(chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    const int64_t gap = total - experts * chosen[i];
    step[i] = gap > 0 ? rate : gap < 0 ? -rate : 0.0;
  }
  bias.add_(at::tensor(step, at::TensorOptions().dtype(at::kDouble)).to(bias.options()));
}

}  // namespace loom::nn

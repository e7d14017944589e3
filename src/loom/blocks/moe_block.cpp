#include "loom/blocks/moe_block.h"

#include <algorithm>
#include <optional>

#include "loom/core/error.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/nn/swiglu.h"

namespace loom::blocks {

struct MoeState : PreNormState {
  nn::Routing routing;
  at::Tensor u;      // [n, 2H] each dispatched row's gate_up output (freed after backward_input)
  at::Tensor a;      // [n, H] its SwiGLU, down's input
  at::Tensor out;    // [n, d_model] its expert's output, for the weights' gradient
  at::Tensor su, sa;  // the shared MLP's u and a
  at::Tensor drows;  // [n, d_model] the experts' output gradient, for down's weight gradient
  at::Tensor du;     // [n, 2H] gate_up's output gradient
  at::Tensor dz;     // [T, E] the router logits' gradient
  at::Tensor sdu;    // the shared MLP's du
  // NOTE [Expert parallelism]: the rows this rank's experts took from the group, and the exchange
  // that brought them (its counts and order serve the backward's exchanges).
  at::Tensor taken;
  std::optional<parallel::ExpertExchange> exchange;
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    visit("scores", routing.scores), visit("expert", routing.expert), visit("weight", routing.weight);
    visit("kept", routing.kept), visit("order", routing.order);
    visit("batch_chosen", routing.batch_chosen), visit("batch_score_sum", routing.batch_score_sum);
    visit("u", u), visit("a", a), visit("out", out), visit("su", su), visit("sa", sa);
    visit("drows", drows), visit("du", du), visit("dz", dz), visit("sdu", sdu), visit("taken", taken);
  }
};

namespace {

// `fn(e, first, count)` for each expert e with rows: its segment of the dispatched rows is
// [first, first + count), the segments in order. An expert without rows runs nothing.
template <class Fn>
void for_each_segment(const std::vector<int64_t>& counts, Fn&& fn) {
  int64_t first = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > 0) fn(static_cast<int64_t>(e), first, counts[e]);
    first += counts[e];
  }
}

// Each expert's SwiGLU MLP on its segment of `rows` [n, d] (`counts` rows each, in order; w1
// and w2 hold those experts): the outputs [n, d], and u and a when asked for (backward needs them).
at::Tensor run_experts(const at::Tensor& rows, const std::vector<int64_t>& counts, const at::Tensor& w1,
                       const at::Tensor& w2, Bf16Products path, at::Tensor* u_out, at::Tensor* a_out) {
  const int64_t n = rows.size(0), hidden = w2.size(2);
  at::Tensor out = at::empty({n, w2.size(1)}, rows.options());
  at::Tensor u = at::empty({n, 2 * hidden}, rows.options()), a = at::empty({n, hidden}, rows.options());
  for_each_segment(counts, [&](int64_t e, int64_t first, int64_t count) {
    at::Tensor ue = u.narrow(0, first, count), ae = a.narrow(0, first, count), oe = out.narrow(0, first, count);
    nn::matmul_into(ue, rows.narrow(0, first, count), w1[e].t(), path);
    ae.copy_(nn::swiglu_forward(ue));
    nn::matmul_into(oe, ae, w2[e].t(), path);
  });
  if (u_out != nullptr) *u_out = u;
  if (a_out != nullptr) *a_out = a;
  return out;
}

}  // namespace

MoeBlock::MoeBlock(const std::string& prefix, const MoeShape& shape, dist::Communicator& tp, parallel::TpOptions options,
                   dist::Communicator* ep, parallel::SpOptions sp)
    : PreNormBlock(prefix, shape.norm, shape.d_model, tp, options), shape_(shape), ep_(ep), sp_(sp) {
  const int64_t experts = shape.router.experts, d = shape.d_model, hidden = shape.hidden;
  router = nn::Param{.name = prefix + ".router.weight", .full_shape = {experts, d}, .init = nn::Init::Normal,
                     .init_std = 0.02, .weight_decay = true};
  gate_up = nn::Param{.name = prefix + ".experts.gate_up.weight", .full_shape = {experts, 2 * hidden, d},
                      .init = nn::Init::Normal, .init_std = 0.02, .weight_decay = true};
  down = nn::Param{.name = prefix + ".experts.down.weight", .full_shape = {experts, d, hidden}, .init = nn::Init::Normal,
                   .init_std = shape.residual_std, .weight_decay = true};
  gate_up.expert = down.expert = true;
  // NOTE [Expert parallelism]: experts [r E/ep, (r + 1) E/ep) here. Under tp the experts are
  // whole on every tp rank and each runs its share of the tokens (NOTE [Experts over tensor
  // parallelism]): their gradients are summands over tp, and they keep the experts' own path
  // (NOTE [Experts beside ZeRO]) even in a group of one.
  if (expert_parallel() || tp.size() > 1) {
    const int rank = ep != nullptr ? ep->rank() : 0, size = ep != nullptr ? ep->size() : 1;
    LOOM_CHECK(experts % size == 0, "[moe] {} experts over an expert group of {}", experts, size);
    for (nn::Param* p : {&gate_up, &down}) {
      p->placements = {AxisPlacement::sharded("ep", 0, rank, size)};
      if (tp.size() > 1) p->placements.push_back(AxisPlacement::summed("tp"));
    }
  }
  if (shape.balance == MoeBalance::Bias) {
    bias_ = at::zeros({experts}, at::TensorOptions().dtype(at::kDouble));
    bias_name_ = prefix + ".router.bias";
  }
  if (shape.shared > 0) {
    const int64_t width = shape.shared * hidden;
    shared_up.emplace(prefix + ".shared.gate_up", d, 2 * width, /*bias=*/false, 0.02, tp, /*groups=*/2);
    shared_down.emplace(prefix + ".shared.down", width, d, /*bias=*/false, shape.residual_std, tp);
  }
}

PreNormState& MoeBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<MoeState>(); }

// The gate's logits in the router's own type (float32 at least: NOTE [Mixture-of-experts block]).
// NOTE [Experts over sequence parallelism]: token (b, i) of this rank's B x S lies in cell
// b x C + c, C the sequence's chunks, c the global chunk holding its position i.
nn::Routing MoeBlock::route(const at::Tensor& h, const nn::RouterOptions& options, bool spread) const {
  const at::Tensor hf = h.reshape({-1, shape_.d_model});
  const at::Tensor logits = at::matmul(hf.to(router.value.scalar_type()), router.value.t());
  if (!spread || !sp_.active()) return nn::route(logits, bias_, options);
  const std::vector<int64_t> chunks = parallel::sequence_chunks(sp_);
  const int64_t batch = h.size(0), seq = h.size(1), per_chunk = seq / static_cast<int64_t>(chunks.size());
  const int64_t total = static_cast<int64_t>(chunks.size()) * sp_.sp->size();
  const auto longs = at::TensorOptions().dtype(at::kLong);
  const at::Tensor chunk = at::tensor(chunks, longs).repeat_interleave(per_chunk);  // [S]
  const at::Tensor cell = (at::arange(batch, longs).unsqueeze(1) * total + chunk.unsqueeze(0)).reshape({-1});
  dist::Communicator& group = *sp_.sp;
  return nn::route(logits, bias_, options,
                   {.cell = cell.to(h.device()), .cells = batch * total,
                    .sum = [&group](at::Tensor& t) { group.all_reduce(t, dist::ReduceOp::Sum); }});
}

at::Tensor MoeBlock::apply_experts(const at::Tensor& rows, const nn::Routing& r, MoeState* s) {
  const at::Tensor w1 = nn::compute_value(gate_up), w2 = nn::compute_value(down);
  at::Tensor* u = s != nullptr ? &s->u : nullptr;
  at::Tensor* a = s != nullptr ? &s->a : nullptr;
  if (!expert_parallel()) return run_experts(rows, r.counts, w1, w2, gate_up.products, u, a);
  parallel::ExpertExchange exchange(*ep_, r.counts);
  const at::Tensor taken = exchange.dispatch(rows);
  const at::Tensor out = exchange.combine(run_experts(taken, exchange.local_counts(), w1, w2, gate_up.products, u, a));
  if (s != nullptr) s->taken = taken, s->exchange.emplace(std::move(exchange));
  return out;
}

at::Tensor MoeBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  LOOM_CHECK(piece.count == 1, "[moe] {} routes a micro-batch whole, not in {} pieces", name(), piece.count);
  auto& s = static_cast<MoeState&>(state);
  const at::Tensor hf = h.reshape({-1, shape_.d_model});
  s.routing = route(h, shape_.router, /*spread=*/true);
  if (tp_.size() > 1) {  // NOTE [Experts over tensor parallelism]: this rank's share of the tokens
    const auto [first, last] = token_share(s.routing.tokens());
    s.routing = nn::restrict_tokens(s.routing, first, last);
  }
  s.out = apply_experts(nn::permute(hf, s.routing), s.routing, &s);
  at::Tensor y = nn::combine(s.out, s.routing).view(h.sizes());
  if (shared_up) {
    s.su = shared_up->forward(h);
    s.sa = nn::swiglu_forward(s.su);
    y.add_(shared_down->forward_partial(s.sa));
  }
  last_load_ = {.counts = s.routing.counts, .dropped = s.routing.dropped, .microbatches = 1};
  return y;
}

// Each token on its own, dropless: a capacity is a training device, not part of the model.
at::Tensor MoeBlock::decode_piece(const at::Tensor& h, int64_t, nn::DecodeCache&) {
  nn::RouterOptions options = shape_.router;
  options.capacity_factor = 0;
  const at::Tensor hf = h.reshape({-1, shape_.d_model});
  const nn::Routing r = route(h, options, /*spread=*/false);
  const at::Tensor out = apply_experts(nn::permute(hf, r), r, nullptr);
  at::Tensor y = nn::combine(out, r).view(h.sizes());
  if (shared_up) y.add_(shared_down->forward_partial(nn::swiglu_forward(shared_up->forward(h))));
  return y;
}

at::Tensor MoeBlock::backward_piece(const at::Tensor& dy, const Piece&, PreNormState& state) {
  auto& s = static_cast<MoeState&>(state);
  const nn::Routing& r = s.routing;
  const at::Tensor dyf = dy.reshape({-1, shape_.d_model});
  const nn::CombineGrads g = nn::combine_backward(dyf, s.out, r);
  // The experts' output gradients travel to them as their rows did (NOTE [Expert parallelism]).
  s.drows = s.exchange ? s.exchange->dispatch(g.rows) : g.rows;
  const std::vector<int64_t>& counts = s.exchange ? s.exchange->local_counts() : r.counts;
  const at::Tensor w1 = nn::compute_value(gate_up), w2 = nn::compute_value(down);
  at::Tensor dx_local = at::empty_like(s.drows);
  s.du = at::empty_like(s.u);
  for_each_segment(counts, [&](int64_t e, int64_t first, int64_t count) {
    const at::Tensor da = nn::matmul(s.drows.narrow(0, first, count), w2[e], down.products);
    at::Tensor due = s.du.narrow(0, first, count), dxe = dx_local.narrow(0, first, count);
    due.copy_(nn::swiglu_backward(da, s.u.narrow(0, first, count)));
    nn::matmul_into(dxe, due, w1[e], gate_up.products);
  });
  at::Tensor dh = nn::unpermute(s.exchange ? s.exchange->combine(dx_local) : dx_local, r);
  nn::AuxLoss aux = nn::aux_loss(r);
  add_trained(r, aux.value);
  at::Tensor dscores;
  if (shape_.aux_coef > 0)  // NOTE [Expert balance]: this micro-batch's share of the mean
    dscores = aux.dscores.mul_(shape_.aux_coef * s.loss_scale * static_cast<double>(r.batch_tokens));
  const auto [first, last] = token_share(r.tokens());
  if (dscores.defined() && tp_.size() > 1) {  // this rank's tokens only: dh is a summand over tp
    dscores.narrow(0, 0, first).zero_();
    dscores.narrow(0, last, r.tokens() - last).zero_();
  }
  s.dz = nn::router_backward(g.weight, dscores, r, shape_.router);
  dh.add_(at::matmul(s.dz, router.value).to(dh.scalar_type()));
  // The router is whole on every tp rank: its gradient takes every token's dz (NOTE [Experts over
  // tensor parallelism]).
  if (tp_.size() > 1) tp_.all_reduce(s.dz, dist::ReduceOp::Sum);
  dh = dh.view(dy.sizes());
  if (shared_up) {
    s.sdu = nn::swiglu_backward(shared_down->backward_input(dy), s.su);
    dh.add_(shared_up->backward_input_partial(s.sdu));
  }
  return dh;
}

std::pair<int64_t, int64_t> MoeBlock::token_share(int64_t tokens) const {
  const int64_t n = tp_.size(), r = tp_.rank();
  return {r * tokens / n, (r + 1) * tokens / n};
}

void MoeBlock::add_trained(const nn::Routing& r, double aux_loss) {
  MoeLoad& t = trained_load_;
  if (t.counts.empty()) t.counts.assign(r.counts.size(), 0), t.chosen.assign(r.chosen.size(), 0);
  for (size_t e = 0; e < r.counts.size(); ++e) t.counts[e] += r.counts[e], t.chosen[e] += r.chosen[e];
  t.dropped += r.dropped;
  t.aux_loss += aux_loss;
  t.microbatches += 1;
}

MoeLoad MoeBlock::take_trained_load() {
  MoeLoad out = std::move(trained_load_);
  trained_load_ = {};
  if (out.counts.empty())
    out.counts.assign(static_cast<size_t>(shape_.router.experts), 0), out.chosen = out.counts;
  return out;
}

void MoeBlock::balance(const std::vector<int64_t>& chosen) {
  if (bias_.defined()) nn::update_balance_bias(bias_, chosen, shape_.bias_rate);
}

std::vector<nn::Buffer> MoeBlock::buffers() {
  if (!bias_.defined()) return {};
  return {{.name = bias_name_, .value = bias_}};
}

void MoeBlock::finish_backward(PreNormState& state) const {
  auto& s = static_cast<MoeState&>(state);
  s.u.reset(), s.su.reset(), s.out.reset();
}

void MoeBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<MoeState&>(state);
  const nn::Routing& r = s.routing;
  const at::Tensor hf = s.h.reshape({-1, shape_.d_model});
  // The experts' inputs: this rank's rows again, or the ones its experts took from the group.
  const at::Tensor rows = s.exchange ? s.taken : nn::permute(hf, r);
  const std::vector<int64_t>& counts = s.exchange ? s.exchange->local_counts() : r.counts;
  for_each_segment(counts, [&](int64_t e, int64_t first, int64_t count) {
    nn::add_product(down.grad[e], s.drows.narrow(0, first, count).t(), s.a.narrow(0, first, count), down.products);
    nn::add_product(gate_up.grad[e], s.du.narrow(0, first, count).t(), rows.narrow(0, first, count),
                    gate_up.products);
  });
  nn::add_product(router.grad, s.dz.t(), hf.to(s.dz.scalar_type()), router.products);
  if (shared_up) {
    shared_down->backward_weight(s.sa, s.dy);
    shared_up->backward_weight(s.h, s.sdu);
  }
}

std::vector<nn::Param*> MoeBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  for (nn::Param* p : {&router, &gate_up, &down}) all.push_back(p);
  if (shared_up) all.push_back(&shared_up->weight), all.push_back(&shared_down->weight);
  return all;
}

// NOTE [Expert parallelism]: the memory at the worst count. A rank sends its kept assignments (its
// share's k per token; an expert takes at most C of the micro-batch's and at most one per token)
// and its experts may receive every rank's of the group: ep times that, and at most E min(C,
// share) (ep ranks x E / ep experts x min(C, share) a source). Time and bytes on the wire take the
// balanced count. A rank's share is T / tp of its T tokens (NOTE [Experts over tensor
// parallelism]); C is the micro-batch's, T x sp tokens under sp (NOTE [Experts over sequence
// parallelism]), whose routing sums travel in one all-reduce.
nn::Cost MoeBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t tokens = batch * seq, d = shape_.d_model, hidden = shape_.hidden, experts = shape_.router.experts;
  const int64_t group = expert_parallel() ? ep_->size() : 1, shares = tp_.size();
  const int64_t k = shape_.router.top_k, width = shape_.shared * hidden / shares;  // the shared MLP's, split over tp
  const int64_t spread = sp_.active() ? sp_.sp->size() : 1;  // the ranks holding a micro-batch's tokens
  // Dropless, every token reaches k experts; a capacity only lowers that.
  const int64_t share = (tokens + shares - 1) / shares, assignments = share * k;
  const int64_t most = experts * std::min(nn::expert_capacity(tokens * spread, shape_.router), share);
  const int64_t kept = std::min(assignments, most), received = std::min(group * kept, most);
  const double expert_flops = 2.0 * static_cast<double>(assignments * 3 * hidden * d);
  const double shared_flops = 2.0 * static_cast<double>(tokens * 3 * width * d);
  const double router_flops = 2.0 * static_cast<double>(tokens * experts * d);
  nn::Cost c;
  c.forward_flops = expert_flops + shared_flops + router_flops;
  c.backward_input_flops = c.forward_flops;
  c.backward_weight_flops = c.forward_flops;
  // The skeleton's state, the routing (scores in float32, choices and order in int64), per row an
  // expert ran u and a (and the row itself, taken from the group), per kept assignment its
  // expert's output; the shared MLP's u and a.
  const int64_t routing_bytes = tokens * experts * 4 + tokens * k * (8 + 4 + 1 + 8);
  const int64_t expert_rows = received * (3 * hidden + (group > 1 ? d : 0)) + kept * d;
  c.saved_bytes = static_cast<double>((skeleton_saved_elements(batch, seq) + expert_rows + tokens * 3 * width) * dtype_bytes +
                                      routing_bytes);
  // The combine's slots of every assignment, the rows the experts run and their u and a.
  c.workspace_bytes = static_cast<double>((tokens * k * d + received * (d + 2 * hidden)) * dtype_bytes);
  const int64_t held = experts / group;  // NOTE [Expert parallelism]
  c.param_bytes = static_cast<double>((held * 3 * hidden * d + experts * d + 3 * width * d + norm.param_elements()) *
                                      dtype_bytes);
  c.gemm_dim = static_cast<double>(std::min({std::max<int64_t>(assignments / experts, 1), d, hidden}));
  if (expert_parallel()) {  // counts, then rows out and back, each pass
    using nn::CommOp, nn::CommPass, nn::CommAxis;
    const double rows = static_cast<double>(kept * d * dtype_bytes);
    c.comm.push_back({.op = CommOp::AllToAll, .axis = CommAxis::Ep, .pass = CommPass::Forward,
                      .bytes = static_cast<double>(experts * 8)});
    c.comm.push_back({.op = CommOp::AllToAll, .axis = CommAxis::Ep, .pass = CommPass::Forward, .bytes = rows, .count = 2});
    c.comm.push_back(
        {.op = CommOp::AllToAll, .axis = CommAxis::Ep, .pass = CommPass::BackwardInput, .bytes = rows, .count = 2});
  }
  if (spread > 1) {  // the routing's micro-batch sums: (slot, cell, expert) counts, scores, tokens
    const auto cells = static_cast<int64_t>(parallel::sequence_chunks(sp_).size()) * spread * batch;
    c.comm.push_back({.op = nn::CommOp::AllReduce, .axis = nn::CommAxis::Sp, .pass = nn::CommPass::Forward,
                      .bytes = static_cast<double>((k * cells * experts + experts + 1) * 8)});
  }
  if (shares > 1)  // the router's logits' gradient, in the scores' type
    c.comm.push_back({.op = nn::CommOp::AllReduce, .axis = nn::CommAxis::Tp, .pass = nn::CommPass::BackwardInput,
                      .bytes = static_cast<double>(tokens * experts * std::max<int64_t>(dtype_bytes, 4))});
  // Dispatch and combine move each assignment's row twice; the activations read u and write a.
  c.elementwise_bytes = static_cast<double>((assignments * (2 * d + 3 * hidden) + tokens * 3 * width) * dtype_bytes);
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  return c;
}

}  // namespace loom::blocks

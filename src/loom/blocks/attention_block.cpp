#include "loom/blocks/attention_block.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/nn/attention.h"
#include "loom/nn/grouped_heads.h"
#include "loom/nn/precision.h"

namespace loom::blocks {
namespace {
struct AttentionState : PreNormState {
  std::vector<parallel::AttentionSaved> cores;  // the attention core's, per tp_overlap piece
                                                // (freed after backward_input)
  at::Tensor merged;           // [B, T, D / tp]: the attention output, proj's input
  std::vector<at::Tensor> dx;  // the input projections' output gradients (qkv's, or q's and kv's)
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    for (parallel::AttentionSaved& core : cores) core.for_each_tensor(visit);
    visit("merged", merged);
    for (at::Tensor& d : dx) visit("dx", d);
  }
};

int64_t kv_heads(const AttentionShape& s) { return s.n_kv_heads > 0 ? s.n_kv_heads : s.n_heads; }
}  // namespace

AttentionBlock::AttentionBlock(const std::string& prefix, const AttentionShape& shape, dist::Communicator& tp,
                               parallel::TpOptions options, parallel::SpOptions sp)
    : PreNormBlock(prefix, shape.norm, shape.d_model, tp, options),
      proj(prefix + ".proj", shape.d_model, shape.d_model, shape.bias, shape.residual_std, tp),
      shape_(shape),
      core_(parallel::make_attention_core(sp, shape.kernel)),
      sequence_chunks_(parallel::sequence_chunks(sp)),
      local_heads_(shape.n_heads / tp.size()),
      local_kv_heads_(kv_heads(shape) / tp.size()),
      head_dim_(shape.d_model / shape.n_heads) {
  const int64_t kv_width = kv_heads(shape) * head_dim_;
  LOOM_CHECK(shape.n_heads % kv_heads(shape) == 0,
             "[attention] {} query heads do not share {} key/value heads in equal groups", shape.n_heads,
             kv_heads(shape));
  LOOM_CHECK(!shape.fused_qkv || kv_heads(shape) == shape.n_heads,
             "[attention] one qkv projection needs as many key/value heads as query heads ({} and {})",
             kv_heads(shape), shape.n_heads);
  if (shape.fused_qkv) {
    qkv.emplace(prefix + ".qkv", shape.d_model, 3 * shape.d_model, shape.bias, 0.02, tp, /*groups=*/3);
  } else {
    q.emplace(prefix + ".q", shape.d_model, shape.d_model, shape.bias, 0.02, tp);
    kv.emplace(prefix + ".kv", shape.d_model, 2 * kv_width, shape.bias, 0.02, tp, /*groups=*/2);
  }
}

PreNormState& AttentionBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<AttentionState>(); }

const nn::RotaryTable* AttentionBlock::rotary(int64_t tokens, const at::TensorOptions& options) {
  if (shape_.rope_theta <= 0) return nullptr;
  if (!rotary_ || rotary_->cos.size(0) != tokens || rotary_->cos.scalar_type() != at::typeMetaToScalarType(options.dtype()))
    rotary_ = nn::RotaryTable::build(parallel::chunk_positions(sequence_chunks_, tokens), head_dim_, shape_.rope_theta,
                                     options);
  return &*rotary_;
}

at::TensorOptions AttentionBlock::rotary_options(const at::Tensor& h) {
  return h.options().dtype(nn::wide_type(h.scalar_type()));
}

AttentionBlock::Heads AttentionBlock::split_heads(const at::Tensor& h, const nn::RotaryTable* table) {
  const int64_t rows = h.size(0), seq = h.size(1), hd = head_dim_;
  at::Tensor q_heads, k, v;  // [rows, heads, seq, hd]
  if (qkv) {
    const at::Tensor heads = qkv->forward(h).view({rows, seq, 3, local_heads_, hd}).permute({2, 0, 3, 1, 4}).contiguous();
    q_heads = heads[0], k = heads[1], v = heads[2];
  } else {
    const at::Tensor kv_out = kv->forward(h).view({rows, seq, 2, local_kv_heads_, hd});
    q_heads = q->forward(h).view({rows, seq, local_heads_, hd}).transpose(1, 2);
    k = kv_out.select(2, 0).transpose(1, 2);
    v = kv_out.select(2, 1).transpose(1, 2).contiguous();
  }
  if (table == nullptr) return {.q = q_heads.contiguous(), .k = k.contiguous(), .v = v};
  // rotary writes a new tensor in that layout
  return {.q = nn::apply_rotary(q_heads, *table), .k = nn::apply_rotary(k, *table), .v = v};
}

at::Tensor AttentionBlock::merge_heads(const at::Tensor& out) const {
  return out.transpose(1, 2).reshape({out.size(0), out.size(2), proj.local_in()});
}

at::Tensor AttentionBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<AttentionState&>(state);
  s.cores.resize(piece.count);
  const Heads heads = split_heads(h, rotary(h.size(1), rotary_options(h)));
  const at::Tensor merged = merge_heads(core_->forward(heads.q, heads.k, heads.v, s.cores[piece.index]));
  parallel::store_chunk(s.merged, merged, 0, piece.first, piece.count);
  return proj.forward_partial(merged);
}

// Rotary at the new tokens' absolute positions; their keys and values (the kv heads, not their
// expansion) join the cache, and the queries attend over all of it, placed at `position` (NOTE
// [Decoding]).
at::Tensor AttentionBlock::decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) {
  std::optional<nn::RotaryTable> table;
  if (shape_.rope_theta > 0) {
    const at::Tensor positions = at::arange(position, position + h.size(1), at::TensorOptions().dtype(at::kLong));
    table = nn::RotaryTable::build(positions, head_dim_, shape_.rope_theta, rotary_options(h));
  }
  const Heads heads = split_heads(h, table ? &*table : nullptr);
  const auto [k, v] = cache.state<nn::KeyValueCache>().append(heads.k, heads.v, position, cache.capacity());
  const int64_t groups = local_heads_ / local_kv_heads_;
  const at::Tensor out = nn::attention_forward(shape_.kernel, heads.q, nn::expand_kv_heads(k, groups),
                                               nn::expand_kv_heads(v, groups), position).out;
  return proj.forward_partial(merge_heads(out));
}

at::Tensor AttentionBlock::projections_backward(const parallel::AttentionInputGrads& g, const nn::RotaryTable* table,
                                                int64_t rows, int64_t seq, const Piece& piece,
                                                std::vector<at::Tensor>& grads) {
  const int64_t hd = head_dim_;
  // Back through the rotations, into the projections' output layouts.
  const at::Tensor dq = table ? nn::apply_rotary_backward(g.dq, *table) : g.dq;
  const at::Tensor dk = table ? nn::apply_rotary_backward(g.dk, *table) : g.dk;
  const int64_t parts = qkv ? 3 : 2;
  at::Tensor packed = at::empty({rows, seq, parts, local_kv_heads_, hd}, g.dq.options());
  if (qkv) packed.select(2, 0).copy_(dq.transpose(1, 2));
  packed.select(2, parts - 2).copy_(dk.transpose(1, 2));
  packed.select(2, parts - 1).copy_(g.dv.transpose(1, 2));
  grads.resize(qkv ? 1 : 2);
  const at::Tensor last = packed.view({rows, seq, parts * local_kv_heads_ * hd});
  parallel::store_chunk(grads.back(), last, 0, piece.first, piece.count);
  if (qkv) return qkv->backward_input_partial(last);
  const at::Tensor dq_out = dq.transpose(1, 2).reshape({rows, seq, local_heads_ * hd});
  parallel::store_chunk(grads.front(), dq_out, 0, piece.first, piece.count);
  return q->backward_input_partial(dq_out).add_(kv->backward_input_partial(last));
}

at::Tensor AttentionBlock::backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<AttentionState&>(state);
  const int64_t rows = dy.size(0), seq = dy.size(1), hd = head_dim_;
  const nn::RotaryTable* table = rotary(seq, rotary_options(dy));
  const at::Tensor dout = proj.backward_input(dy).view({rows, seq, local_heads_, hd}).transpose(1, 2).contiguous();
  const at::Tensor out = s.merged.narrow(0, piece.first, rows).view({rows, seq, local_heads_, hd}).transpose(1, 2);
  const parallel::AttentionInputGrads g = core_->backward(dout, out, s.cores[piece.index]);
  return projections_backward(g, table, rows, seq, piece, s.dx);
}

void AttentionBlock::finish_backward(PreNormState& state) const { static_cast<AttentionState&>(state).cores.clear(); }

void AttentionBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<AttentionState&>(state);
  proj.backward_weight(s.merged, s.dy);
  if (qkv) {
    qkv->backward_weight(s.h, s.dx[0]);
  } else {
    q->backward_weight(s.h, s.dx[0]);
    kv->backward_weight(s.h, s.dx[1]);
  }
}

std::vector<nn::Param*> AttentionBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  for (auto* linear : {&qkv, &q, &kv}) {
    if (!*linear) continue;
    all.push_back(&(*linear)->weight);
    if (shape_.bias) all.push_back(&(*linear)->bias);
  }
  all.push_back(&proj.weight);
  if (shape_.bias) all.push_back(&proj.bias);
  return all;
}

// Backward beyond the saved state, in units of [rows, d_model / tp] (issue 33): the attention
// core's gradient (dout, the zeroed dq, dk, dv, the scaled queries) beside two score tiles of
// [batch x heads, queries, tile] in the wide type (probabilities and dP); then dout, dq, dk, dv and
// their packed copy with the input projections' gradient. Measured on gpt shapes (d_model 64,
// seq 64, batch 2, 4 heads, one tile): 13.3 units, the larger form here 13. With fewer kv heads
// the same count is an upper bound.
double AttentionBlock::backward_workspace(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t local = proj.local_in();
  const auto unit = static_cast<double>(batch * seq * local * dtype_bytes);
  const int64_t keys = core_->sequence_ranks() * seq, wide = std::max<int64_t>(dtype_bytes, 4);
  const auto tile = static_cast<double>(batch * local_heads_ * seq * std::min(shape_.kernel.tile, keys) * wide);
  return std::max(5 * unit + 2 * tile, 7 * unit + static_cast<double>(batch * seq * shape_.d_model * dtype_bytes));
}

// Per rank: the linears' and the attention's FLOPs shrink by tp; the norm's activations shrink
// by tp only under tp_sequence.
nn::Cost AttentionBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = local_heads_ * head_dim_, local_kv = local_kv_heads_ * head_dim_;
  const int64_t d_model = shape_.d_model;
  double linear = proj.flops(rows);
  for (const auto* p : {&qkv, &q, &kv})
    if (*p) linear += (*p)->flops(rows);
  // This rank's share of the whole sequence's causal pairs (its queries see earlier segments).
  const int64_t n = core_->sequence_ranks();
  const double attention = nn::causal_attention_flops(batch, local_heads_, n * seq, head_dim_) / static_cast<double>(n);
  nn::Cost c;
  c.forward_flops = linear + attention;
  c.backward_input_flops = linear + 2 * attention;  // dQ, dK, dV, dP: twice the forward's matmuls
  c.backward_weight_flops = linear;
  // x, its statistics and h; q and the merged output (and ulysses' own copy of it) of
  // [rows, d_model / tp]; k and v of [rows, kv heads / tp x head_dim]; the lse.
  const int64_t outputs = core_->keeps_output() ? 2 : 1;
  c.saved_bytes = static_cast<double>((skeleton_saved_elements(batch, seq) + (1 + outputs) * rows * local +
                                       2 * rows * local_kv + batch * local_heads_ * seq) *
                                      dtype_bytes);
  c.workspace_bytes = backward_workspace(batch, seq, dtype_bytes);
  const int64_t biases = shape_.bias ? local + 2 * local_kv + d_model : 0;
  c.param_bytes = static_cast<double>((2 * d_model * local + 2 * d_model * local_kv + biases + norm.param_elements()) *
                                      dtype_bytes);
  c.attention_flops = attention;
  c.gemm_dim = static_cast<double>(std::min({rows, d_model, local_kv}));
  // Without rotary: the biases, q, k and v to heads, the merge; with it: rotary on q and k, to
  // heads, the merge. Fused (NOTE [Kernel fusion]): the biases in the GEMMs' epilogues, the
  // attention kernel reading and writing the heads in place, rotary one pass over q and k.
  const int64_t passes = shape_.rope_theta > 0 ? 6 * (local + local_kv) : 6 * local;
  const int64_t fused_passes = shape_.rope_theta > 0 ? 2 * (local + local_kv) : 0;
  c.elementwise_bytes = static_cast<double>(rows * passes * dtype_bytes);
  c.fusable_bytes = static_cast<double>(rows * (passes - fused_passes) * dtype_bytes);
  c.score_bytes = nn::causal_attention_score_bytes(batch, local_heads_, n * seq, dtype_bytes) / static_cast<double>(n);
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  for (nn::CommUse& u : core_->comm(batch, local_heads_, local_kv_heads_, seq, head_dim_, dtype_bytes)) c.comm.push_back(u);
  return c;
}

}  // namespace loom::blocks

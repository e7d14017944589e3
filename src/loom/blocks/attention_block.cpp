#include "loom/blocks/attention_block.h"

#include <algorithm>

#include "loom/nn/attention.h"

namespace loom::blocks {
namespace {
struct State : PreNormState {
  std::vector<parallel::AttentionSaved> cores;  // the attention core's, per tp_overlap piece
                                                // (freed after backward_input)
  at::Tensor merged;  // [B, T, D / tp]: the attention output, proj's input
  at::Tensor dqkv;    // qkv's output gradient, for its weight gradient
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    for (parallel::AttentionSaved& core : cores) core.for_each_tensor(visit);
    visit("merged", merged), visit("dqkv", dqkv);
  }
};
}  // namespace

AttentionBlock::AttentionBlock(const std::string& prefix, int64_t d_model, int64_t n_heads, const nn::AttentionKernel& kernel,
                               double residual_std, dist::Communicator& tp, parallel::TpOptions options,
                               parallel::SpOptions sp)
    : PreNormBlock(prefix, NormKind::Layer, d_model, tp, options),
      qkv(prefix + ".qkv", d_model, 3 * d_model, true, 0.02, tp, /*groups=*/3),
      proj(prefix + ".proj", d_model, d_model, true, residual_std, tp),
      core_(parallel::make_attention_core(sp, kernel)),
      local_heads_(n_heads / tp.size()),
      kernel_(kernel) {}

PreNormState& AttentionBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<State>(); }

at::Tensor AttentionBlock::split_heads(const at::Tensor& h) {
  const int64_t rows = h.size(0), seq = h.size(1), hd = proj.local_in() / local_heads_;
  return qkv.forward(h).view({rows, seq, 3, local_heads_, hd}).permute({2, 0, 3, 1, 4}).contiguous();
}

at::Tensor AttentionBlock::merge_heads(const at::Tensor& out) const {
  return out.transpose(1, 2).reshape({out.size(0), out.size(2), proj.local_in()});
}

at::Tensor AttentionBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  s.cores.resize(piece.count);
  // q, k, v of the local heads, attention, and the merged heads of this piece
  const at::Tensor heads = split_heads(h);
  const at::Tensor merged = merge_heads(core_->forward(heads[0], heads[1], heads[2], s.cores[piece.index]));
  parallel::store_chunk(s.merged, merged, 0, piece.first, piece.count);
  return proj.forward_partial(merged);
}

// The new tokens' keys and values join the cache; their queries attend over all of it, placed at
// `position` (NOTE [Decoding]).
at::Tensor AttentionBlock::decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) {
  const at::Tensor heads = split_heads(h);
  const auto [k, v] = cache.state<nn::KeyValueCache>().append(heads[1], heads[2], position, cache.capacity());
  return proj.forward_partial(merge_heads(nn::attention_forward(kernel_, heads[0], k, v, position).out));
}

at::Tensor AttentionBlock::backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  const int64_t rows = dy.size(0), seq = dy.size(1), local = proj.local_in(), hd = local / local_heads_;
  const at::Tensor dout = proj.backward_input(dy).view({rows, seq, local_heads_, hd}).transpose(1, 2).contiguous();
  const at::Tensor out = s.merged.narrow(0, piece.first, rows).view({rows, seq, local_heads_, hd}).transpose(1, 2);
  const parallel::AttentionInputGrads g = core_->backward(dout, out, s.cores[piece.index]);
  at::Tensor dqkv = at::empty({rows, seq, 3, local_heads_, hd}, dout.options());  // qkv's output layout
  dqkv.select(2, 0).copy_(g.dq.transpose(1, 2));
  dqkv.select(2, 1).copy_(g.dk.transpose(1, 2));
  dqkv.select(2, 2).copy_(g.dv.transpose(1, 2));
  const at::Tensor packed = dqkv.view({rows, seq, 3 * local});
  parallel::store_chunk(s.dqkv, packed, 0, piece.first, piece.count);
  return qkv.backward_input_partial(packed);
}

void AttentionBlock::finish_backward(PreNormState& state) const { static_cast<State&>(state).cores.clear(); }

void AttentionBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<State&>(state);
  proj.backward_weight(s.merged, s.dy);
  qkv.backward_weight(s.h, s.dqkv);
}

std::vector<nn::Param*> AttentionBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  for (nn::Param* p : {&qkv.weight, &qkv.bias, &proj.weight, &proj.bias}) all.push_back(p);
  return all;
}

// Backward beyond the saved state, in units of [rows, d_model / tp] (issue 33): the attention
// core's gradient (dout, the zeroed dq, dk, dv, the scaled queries) beside two score tiles of
// [batch x heads, queries, tile] in the wide type (probabilities and dP); then dout, dq, dk, dv and
// their packed copy dqkv with qkv's input gradient. Measured on gpt shapes (d_model 64, seq 64,
// batch 2, 4 heads, one tile): 13.3 units, the larger form here 13.
double AttentionBlock::backward_workspace(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t local = proj.local_in(), d_model = qkv.weight.full_shape.back();
  const auto unit = static_cast<double>(batch * seq * local * dtype_bytes);
  const int64_t keys = core_->sequence_ranks() * seq, wide = std::max<int64_t>(dtype_bytes, 4);
  const auto tile = static_cast<double>(batch * local_heads_ * seq * std::min(kernel_.tile, keys) * wide);
  return std::max(5 * unit + 2 * tile, 7 * unit + static_cast<double>(batch * seq * d_model * dtype_bytes));
}

// Per rank: the linears' and the attention's FLOPs shrink by tp; the norm's activations shrink
// by tp only under tp_sequence.
nn::Cost AttentionBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = proj.local_in(), hd = local / local_heads_;
  const double linear = qkv.flops(rows) + proj.flops(rows);
  // This rank's share of the whole sequence's causal pairs (its queries see earlier segments).
  const int64_t n = core_->sequence_ranks();
  const double attention = nn::causal_attention_flops(batch, local_heads_, n * seq, hd) / static_cast<double>(n);
  nn::Cost c;
  c.forward_flops = linear + attention;
  c.backward_input_flops = linear + 2 * attention;  // dQ, dK, dV, dP: twice the forward's matmuls
  c.backward_weight_flops = linear;
  // x, its statistics and h; q, k, v, the merged output (and ulysses' own copy of it) of
  // [rows, d_model / tp]; the lse.
  const int64_t attention_outputs = core_->keeps_output() ? 2 : 1;
  c.saved_bytes = static_cast<double>(
      (skeleton_saved_elements(batch, seq) + (3 + attention_outputs) * rows * local + batch * local_heads_ * seq) *
      dtype_bytes);
  const int64_t d_model = qkv.weight.full_shape.back();
  c.workspace_bytes = backward_workspace(batch, seq, dtype_bytes);
  c.param_bytes = static_cast<double>((4 * d_model * local + 3 * local + d_model + norm.param_elements()) * dtype_bytes);
  c.attention_flops = attention;
  c.gemm_dim = static_cast<double>(std::min({rows, d_model, local}));
  c.elementwise_bytes = static_cast<double>(6 * rows * local * dtype_bytes) +  // biases; q, k, v to heads; merge
                        nn::causal_attention_score_bytes(batch, local_heads_, n * seq, dtype_bytes) / static_cast<double>(n);
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  for (nn::CommUse& u : core_->comm(batch, local_heads_, local_heads_, seq, hd, dtype_bytes)) c.comm.push_back(u);
  return c;
}

}  // namespace loom::blocks

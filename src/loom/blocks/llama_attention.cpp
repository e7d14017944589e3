#include "loom/blocks/llama_attention.h"

#include <algorithm>

#include "loom/nn/precision.h"

#include "loom/core/error.h"
#include "loom/nn/attention.h"
#include "loom/nn/grouped_heads.h"

namespace loom::blocks {
namespace {
struct State : PreNormState {
  std::vector<parallel::AttentionSaved> cores;  // the attention core's, per tp_overlap piece
                                                // (freed after backward_input)
  at::Tensor merged;   // [B, T, D / tp]: the attention output, proj's input
  at::Tensor dq, dkv;  // q's and kv's output gradients, for their weight gradients
  void for_each_tensor(const nn::TensorVisitor& visit) override {
    for_each_skeleton_tensor(visit);
    for (parallel::AttentionSaved& core : cores) core.for_each_tensor(visit);
    visit("merged", merged), visit("dq", dq), visit("dkv", dkv);
  }
};
}  // namespace

LlamaAttentionBlock::LlamaAttentionBlock(const std::string& prefix, const LlamaAttentionShape& shape,
                                         dist::Communicator& tp, parallel::TpOptions options, parallel::SpOptions sp)
    : PreNormBlock(prefix, NormKind::Rms, shape.d_model, tp, options),
      q(prefix + ".q", shape.d_model, shape.d_model, false, 0.02, tp),
      kv(prefix + ".kv", shape.d_model, 2 * shape.n_kv_heads * (shape.d_model / shape.n_heads), false, 0.02, tp,
         /*groups=*/2),
      proj(prefix + ".proj", shape.d_model, shape.d_model, false, shape.residual_std, tp),
      core_(parallel::make_attention_core(sp, shape.kernel)),
      sequence_chunks_(parallel::sequence_chunks(sp)),
      d_model_(shape.d_model),
      local_heads_(shape.n_heads / tp.size()),
      local_kv_heads_(shape.n_kv_heads / tp.size()),
      head_dim_(shape.d_model / shape.n_heads),
      kernel_(shape.kernel),
      theta_(shape.rope_theta) {
  LOOM_CHECK(shape.n_kv_heads > 0 && shape.n_heads % shape.n_kv_heads == 0,
             "[attention] {} query heads do not share {} key/value heads in equal groups", shape.n_heads,
             shape.n_kv_heads);
}

PreNormState& LlamaAttentionBlock::emplace_state(nn::Saved& saved) const { return saved.emplace<State>(); }

const nn::RotaryTable& LlamaAttentionBlock::rotary(int64_t tokens, const at::TensorOptions& options) {
  if (!rotary_ || rotary_->cos.size(0) != tokens || rotary_->cos.scalar_type() != at::typeMetaToScalarType(options.dtype()))
    rotary_ = nn::RotaryTable::build(parallel::chunk_positions(sequence_chunks_, tokens), head_dim_, theta_, options);
  return *rotary_;
}

at::TensorOptions LlamaAttentionBlock::rotary_options(const at::Tensor& h) {
  return h.options().dtype(nn::wide_type(h.scalar_type()));
}

LlamaAttentionBlock::Heads LlamaAttentionBlock::split_heads(const at::Tensor& h, const nn::RotaryTable& table) {
  const int64_t rows = h.size(0), seq = h.size(1), hd = head_dim_;
  // [rows, heads, seq, hd]; rotary writes a new tensor in that layout
  const at::Tensor kv_out = kv.forward(h).view({rows, seq, 2, local_kv_heads_, hd});
  return {.q = nn::apply_rotary(q.forward(h).view({rows, seq, local_heads_, hd}).transpose(1, 2), table),
          .k = nn::apply_rotary(kv_out.select(2, 0).transpose(1, 2), table),
          .v = kv_out.select(2, 1).transpose(1, 2).contiguous()};
}

at::Tensor LlamaAttentionBlock::merge_heads(const at::Tensor& out) const {
  return out.transpose(1, 2).reshape({out.size(0), out.size(2), local_heads_ * head_dim_});
}

at::Tensor LlamaAttentionBlock::forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  s.cores.resize(piece.count);
  const Heads heads = split_heads(h, rotary(h.size(1), rotary_options(h)));
  const at::Tensor merged = merge_heads(core_->forward(heads.q, heads.k, heads.v, s.cores[piece.index]));
  parallel::store_chunk(s.merged, merged, 0, piece.first, piece.count);
  return proj.forward_partial(merged);
}

// Rotary at the new tokens' absolute positions; their keys and values (the kv heads, not their
// expansion) join the cache, and the queries attend over all of it (NOTE [Decoding]).
at::Tensor LlamaAttentionBlock::decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) {
  const at::Tensor positions = at::arange(position, position + h.size(1), at::TensorOptions().dtype(at::kLong));
  const Heads heads = split_heads(h, nn::RotaryTable::build(positions, head_dim_, theta_, rotary_options(h)));
  const auto [k, v] = cache.state<nn::KeyValueCache>().append(heads.k, heads.v, position, cache.capacity());
  const int64_t groups = local_heads_ / local_kv_heads_;
  const at::Tensor out = nn::attention_forward(kernel_, heads.q, nn::expand_kv_heads(k, groups),
                                               nn::expand_kv_heads(v, groups), position).out;
  return proj.forward_partial(merge_heads(out));
}

at::Tensor LlamaAttentionBlock::backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& state) {
  auto& s = static_cast<State&>(state);
  const int64_t rows = dy.size(0), seq = dy.size(1), hd = head_dim_;
  const nn::RotaryTable& table = rotary(seq, rotary_options(dy));
  const at::Tensor dout = proj.backward_input(dy).view({rows, seq, local_heads_, hd}).transpose(1, 2).contiguous();
  const at::Tensor out = s.merged.narrow(0, piece.first, rows).view({rows, seq, local_heads_, hd}).transpose(1, 2);
  const parallel::AttentionInputGrads g = core_->backward(dout, out, s.cores[piece.index]);
  // Back through the rotations, into q's and kv's output layouts.
  const at::Tensor dq = nn::apply_rotary_backward(g.dq, table).transpose(1, 2).reshape({rows, seq, local_heads_ * hd});
  at::Tensor dkv = at::empty({rows, seq, 2, local_kv_heads_, hd}, dout.options());
  dkv.select(2, 0).copy_(nn::apply_rotary_backward(g.dk, table).transpose(1, 2));
  dkv.select(2, 1).copy_(g.dv.transpose(1, 2));
  const at::Tensor packed = dkv.view({rows, seq, 2 * local_kv_heads_ * hd});
  parallel::store_chunk(s.dq, dq, 0, piece.first, piece.count);
  parallel::store_chunk(s.dkv, packed, 0, piece.first, piece.count);
  return q.backward_input_partial(dq).add_(kv.backward_input_partial(packed));
}

void LlamaAttentionBlock::finish_backward(PreNormState& state) const { static_cast<State&>(state).cores.clear(); }

void LlamaAttentionBlock::weight_gradients(PreNormState& state) {
  auto& s = static_cast<State&>(state);
  proj.backward_weight(s.merged, s.dy);
  q.backward_weight(s.h, s.dq);
  kv.backward_weight(s.h, s.dkv);
}

std::vector<nn::Param*> LlamaAttentionBlock::params() {
  std::vector<nn::Param*> all = norm.params();
  for (nn::Param* p : {&q.weight, &kv.weight, &proj.weight}) all.push_back(p);
  return all;
}

nn::Cost LlamaAttentionBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = local_heads_ * head_dim_, local_kv = local_kv_heads_ * head_dim_;
  const double linear = q.flops(rows) + kv.flops(rows) + proj.flops(rows);
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
  c.param_bytes = static_cast<double>((2 * d_model_ * local + 2 * d_model_ * local_kv + norm.param_elements()) *
                                      dtype_bytes);
  c.attention_flops = attention;
  c.gemm_dim = static_cast<double>(std::min({rows, d_model_, local_kv}));
  c.elementwise_bytes = static_cast<double>(6 * rows * (local + local_kv) * dtype_bytes) +  // rotary; to heads; merge
                        nn::causal_attention_score_bytes(batch, local_heads_, n * seq, dtype_bytes) / static_cast<double>(n);
  add_skeleton_costs(c, batch, seq, dtype_bytes);
  for (nn::CommUse& u : core_->comm(batch, local_heads_, local_kv_heads_, seq, head_dim_, dtype_bytes)) c.comm.push_back(u);
  return c;
}

}  // namespace loom::blocks

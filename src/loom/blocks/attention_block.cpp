#include "loom/blocks/attention_block.h"

#include <optional>

#include "loom/nn/attention.h"
#include "loom/core/error.h"

namespace loom::blocks {
namespace {
struct State : nn::SavedState {
  at::Tensor x, mean, rstd;     // input and its norm statistics (freed after backward_input)
  at::Tensor h;                 // normed input, qkv's input (this rank's tokens under tp_sequence
                                // until backward_input gathers the full sequence again)
  at::Tensor heads;             // [3, B, H, T, hd]: q, k, v (freed after backward_input); under
                                // ulysses [3, B, H/sp, T_full, hd], as attention saw them
  at::Tensor lse;               // [B, H, T] (freed after backward_input), same layout as heads
  at::Tensor out;               // ulysses: attention's output [B, H/sp, T_full, hd]
  at::Tensor merged;            // [B, T, D]: attention output, proj's input
  at::Tensor dy, dqkv;          // gradients the weight-gradient half needs (dy of the full sequence)
  nn::NormGrads norm_grads;         // the norm's parameter gradients, from backward_input
};
}  // namespace

AttentionBlock::AttentionBlock(const std::string& prefix, int64_t d_model, int64_t n_heads, int64_t tile,
                               double residual_std, dist::Communicator& tp, parallel::TpOptions options,
                               parallel::SpOptions sp)
    : tp_(tp),
      chunks_(tp.size() > 1 ? options.overlap : 1),
      sequence_(tp.size() > 1 && options.sequence),
      sp_(sp),
      norm(prefix + ".norm", d_model, sequence_),
      qkv(prefix + ".qkv", d_model, 3 * d_model, true, 0.02, tp, /*groups=*/3),
      proj(prefix + ".proj", d_model, d_model, true, residual_std, tp),
      prefix_(prefix),
      d_model_(d_model),
      local_heads_(n_heads / tp.size()),
      tile_(tile) {}

at::Tensor AttentionBlock::forward(const at::Tensor& x, const nn::MicroBatch&, nn::Saved& saved) {
  const int64_t batch = x.size(0), local = proj.local_in(), hd = local / local_heads_;
  auto& s = saved.emplace<State>();
  auto n = norm.forward(x);
  s.x = x, s.mean = n.mean, s.rstd = n.rstd, s.h = n.y;
  parallel::TpRegion region(tp_, sequence_);
  region.enter_chunks(n.y, chunks_);
  for (int64_t c = 0; c < chunks_; ++c) {
    const int64_t first = parallel::chunk_rows(batch, chunks_, c).first;
    const at::Tensor h = region.next_entered();  // [rows, seq, d_model]
    const int64_t rows = h.size(0), seq = h.size(1);
    // q, k, v of the local heads, attention, and the merged heads of this chunk
    const at::Tensor heads =
        qkv.forward(h).view({rows, seq, 3, local_heads_, hd}).permute({2, 0, 3, 1, 4}).contiguous();
    nn::AttentionForward att;
    at::Tensor kept = heads;  // what backward needs of q, k and v
    if (sp_.active() && sp_.mode == parallel::SpMode::Ring) {  // k and v blocks around the ring
      auto ring = parallel::ring_attention_forward(*sp_.sp, heads[0], heads[1], heads[2], tile_);
      att.out = ring.out, att.lse = ring.lse;
    } else if (sp_.active() && sp_.mode == parallel::SpMode::Ulysses) {  // the whole sequence of heads/sp heads, and back
      kept = parallel::segments_to_heads(*sp_.sp, heads);
      att = nn::causal_attention_forward(kept[0], kept[1], kept[2], tile_);
      parallel::store_chunk(s.out, att.out, 0, first, chunks_);
      att.out = parallel::heads_to_segments(*sp_.sp, att.out.unsqueeze(0))[0];
    } else if (sp_.active()) {  // the local queries against the keys of this and every earlier segment
      const at::Tensor kv = parallel::gather_visible_kv(*sp_.sp, heads.narrow(0, 1, 2));
      att = nn::causal_attention_forward(heads[0], kv[0], kv[1], tile_, sp_.sp->rank() * seq);
    } else {
      att = nn::causal_attention_forward(heads[0], heads[1], heads[2], tile_);
    }
    const at::Tensor merged = att.out.transpose(1, 2).reshape({rows, seq, local});
    parallel::store_chunk(s.heads, kept, 1, first, chunks_);
    parallel::store_chunk(s.lse, att.lse, 0, first, chunks_);
    parallel::store_chunk(s.merged, merged, 0, first, chunks_);
    region.leave(proj.forward_partial(merged));  // reduced while the next chunk attends
  }
  at::Tensor y = region.finish();
  proj.add_bias(y);
  return y.add_(x);
}

at::Tensor AttentionBlock::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<State>();
  const int64_t batch = dy.size(0), local = proj.local_in(), hd = local / local_heads_;
  std::optional<parallel::PendingSequenceGather> h_full;
  if (sequence_) h_full.emplace(tp_, s.h);  // travels while backward computes
  parallel::TpRegion region(tp_, sequence_);
  region.enter_chunks(dy, chunks_);
  for (int64_t c = 0; c < chunks_; ++c) {
    const int64_t first = parallel::chunk_rows(batch, chunks_, c).first;
    const at::Tensor dy_c = region.next_entered();  // [rows, seq, d_model]
    const int64_t rows = dy_c.size(0), seq = dy_c.size(1);
    parallel::store_chunk(s.dy, dy_c, 0, first, chunks_);
    const at::Tensor dout =
        proj.backward_input(dy_c).view({rows, seq, local_heads_, hd}).transpose(1, 2).contiguous();
    const at::Tensor out = s.merged.narrow(0, first, rows).view({rows, seq, local_heads_, hd}).transpose(1, 2);
    const at::Tensor heads = s.heads.narrow(1, first, rows);
    const at::Tensor lse = s.lse.narrow(0, first, rows);
    at::Tensor packed;  // [3, rows, heads, seq, hd]: dq, dk, dv
    if (sp_.active() && sp_.mode == parallel::SpMode::Ring) {
      packed = parallel::ring_attention_backward(*sp_.sp, dout, heads[0], heads[1], heads[2], out.contiguous(), lse,
                                                 tile_);
    } else if (sp_.active() && sp_.mode == parallel::SpMode::Ulysses) {  // dout to the heads layout; dq, dk, dv back
      const at::Tensor dout_heads = parallel::segments_to_heads(*sp_.sp, dout.unsqueeze(0))[0];
      auto g = nn::causal_attention_backward(dout_heads, heads[0], heads[1], heads[2], s.out.narrow(0, first, rows), lse,
                                         tile_);
      packed = parallel::heads_to_segments(*sp_.sp, g.packed);
    } else if (sp_.active()) {  // the keys of segments 0..r again; their gradients go back to their owners
      const at::Tensor kv = parallel::gather_visible_kv(*sp_.sp, heads.narrow(0, 1, 2).contiguous());
      auto g = nn::causal_attention_backward(dout, heads[0], kv[0], kv[1], out, lse, tile_, sp_.sp->rank() * seq);
      const at::Tensor dkv = parallel::reduce_scatter_visible_kv(*sp_.sp, at::stack({g.dk, g.dv}));
      packed = at::cat({g.dq.unsqueeze(0), dkv});
    } else {
      packed = nn::causal_attention_backward(dout, heads[0], heads[1], heads[2], out, lse, tile_).packed;
    }
    const at::Tensor dqkv = packed.permute({1, 3, 0, 2, 4}).reshape({rows, seq, 3 * local});
    parallel::store_chunk(s.dqkv, dqkv, 0, first, chunks_);
    region.leave(qkv.backward_input_partial(dqkv));  // reduced while the next chunk computes
  }
  const at::Tensor dh = region.finish();
  s.heads.reset(), s.lse.reset(), s.out.reset();
  s.norm_grads = norm.backward(dh, s.x, s.mean, s.rstd);
  s.x.reset(), s.mean.reset(), s.rstd.reset();
  if (h_full) s.h = h_full->wait();
  at::Tensor dx = std::move(s.norm_grads.dx);
  return dx.add_(dy);  // the residual branch
}

void AttentionBlock::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<State>();
  proj.backward_weight(s.merged, s.dy);
  qkv.backward_weight(s.h, s.dqkv);
  norm.accumulate(s.norm_grads);
  saved.clear();
}

std::vector<nn::Param*> AttentionBlock::params() {
  return {&norm.gain, &norm.bias, &qkv.weight, &qkv.bias, &proj.weight, &proj.bias};
}

// Per rank: the linears' and the attention's FLOPs shrink by tp; the norm's activations shrink
// by tp only under tp_sequence.
nn::Cost AttentionBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = proj.local_in(), hd = local / local_heads_;
  const int64_t norm_rows = sequence_ ? rows / tp_.size() : rows;
  const double linear = qkv.flops(rows) + proj.flops(rows);
  const double attention = nn::causal_attention_flops(batch, local_heads_, seq, hd);
  nn::Cost c;
  c.forward_flops = linear + attention;
  c.backward_input_flops = linear + 2 * attention;  // dQ, dK, dV, dP: twice the forward's matmuls
  c.backward_weight_flops = linear;
  // x and h of [norm_rows, d_model]; q/k/v and the merged output of [rows, d_model / tp]; the lse.
  c.saved_bytes = static_cast<double>((2 * norm_rows * d_model_ + 4 * rows * local + batch * local_heads_ * seq) *
                                      dtype_bytes);
  c.param_bytes = static_cast<double>((4 * d_model_ * local + 2 * d_model_ + 3 * local + d_model_) * dtype_bytes);
  return c;
}

}  // namespace loom::blocks

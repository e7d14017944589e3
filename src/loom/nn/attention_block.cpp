#include "loom/nn/attention_block.h"

#include "loom/nn/attention.h"
#include "loom/core/error.h"
#include "loom/parallel/chunked_all_reduce.h"

namespace loom::nn {
namespace {
struct State : SavedState {
  at::Tensor x, mean, rstd;     // input and its norm statistics (freed after backward_input)
  at::Tensor h;                 // normed input, qkv's input
  at::Tensor heads;             // [3, B, H, T, hd]: q, k, v (freed after backward_input)
  at::Tensor lse;               // [B, H, T] (freed after backward_input)
  at::Tensor merged;            // [B, T, D]: attention output, proj's input
  at::Tensor dy, dqkv;          // gradients the weight-gradient half needs
  NormGrads norm_grads;         // the norm's parameter gradients, from backward_input
};
}  // namespace

AttentionBlock::AttentionBlock(const std::string& prefix, int64_t d_model, int64_t n_heads, int64_t tile,
                               double residual_std, dist::Communicator& tp, int64_t overlap_chunks)
    : tp_(tp),
      chunks_(tp.size() > 1 ? overlap_chunks : 1),
      norm(prefix + ".norm", d_model),
      qkv(prefix + ".qkv", d_model, 3 * d_model, true, 0.02, tp, /*groups=*/3),
      proj(prefix + ".proj", d_model, d_model, true, residual_std, tp),
      prefix_(prefix),
      d_model_(d_model),
      local_heads_(n_heads / tp.size()),
      tile_(tile) {}

at::Tensor AttentionBlock::forward(const at::Tensor& x, const MicroBatch&, Saved& saved) {
  const int64_t batch = x.size(0), seq = x.size(1), local = proj.local_in(), hd = local / local_heads_;
  auto& s = saved.emplace<State>();
  auto n = norm.forward(x);
  s.x = x, s.mean = n.mean, s.rstd = n.rstd, s.h = n.y;
  // q, k, v of the local heads, attention, and the merged heads of `rows` batch rows from `first`.
  auto attend = [&](int64_t first, int64_t rows) {
    const at::Tensor heads = qkv.forward(n.y.narrow(0, first, rows))
                                 .view({rows, seq, 3, local_heads_, hd})
                                 .permute({2, 0, 3, 1, 4})
                                 .contiguous();
    auto att = causal_attention_forward(heads[0], heads[1], heads[2], tile_);
    return std::tuple{heads, att.lse, att.out.transpose(1, 2).reshape({rows, seq, local})};
  };
  if (chunks_ == 1) {
    std::tie(s.heads, s.lse, s.merged) = attend(0, batch);
    return x + proj.forward(s.merged);
  }
  // NOTE [Sub-pipelined TP]: each chunk's projection is reduced while the next chunk attends.
  s.heads = at::empty({3, batch, local_heads_, seq, hd}, x.options());
  s.lse = at::empty({batch, local_heads_, seq}, x.options());
  s.merged = at::empty({batch, seq, local}, x.options());
  at::Tensor y = at::empty_like(x);
  parallel::ChunkedAllReduce reduce(tp_);
  for (int64_t c = 0; c < chunks_; ++c) {
    const auto [first, rows] = parallel::chunk_rows(batch, chunks_, c);
    auto [heads, lse, merged] = attend(first, rows);
    s.heads.narrow(1, first, rows).copy_(heads);
    s.lse.narrow(0, first, rows).copy_(lse);
    s.merged.narrow(0, first, rows).copy_(merged);
    at::Tensor y_c = y.narrow(0, first, rows);
    y_c.copy_(proj.forward_partial(merged));
    reduce.start(y_c);
  }
  reduce.finish();
  proj.add_bias(y);
  return y.add_(x);
}

at::Tensor AttentionBlock::backward_input(const at::Tensor& dy, Saved& saved) {
  auto& s = saved.get<State>();
  const int64_t batch = dy.size(0), seq = dy.size(1), local = proj.local_in(), hd = local / local_heads_;
  s.dy = dy;
  const at::Tensor dmerged = proj.backward_input(dy);
  // dqkv of `rows` batch rows from `first`, laid out [rows, seq, 3 * local] like qkv's output.
  auto attend_backward = [&](int64_t first, int64_t rows) {
    const at::Tensor dout = dmerged.narrow(0, first, rows).view({rows, seq, local_heads_, hd}).transpose(1, 2).contiguous();
    const at::Tensor out = s.merged.narrow(0, first, rows).view({rows, seq, local_heads_, hd}).transpose(1, 2);
    const at::Tensor heads = s.heads.narrow(1, first, rows);
    const at::Tensor lse = s.lse.narrow(0, first, rows);
    auto g = causal_attention_backward(dout, heads[0], heads[1], heads[2], out, lse, tile_);
    return g.packed.permute({1, 3, 0, 2, 4}).reshape({rows, seq, 3 * local});
  };
  at::Tensor dh;
  if (chunks_ == 1) {
    s.dqkv = attend_backward(0, batch);
    dh = qkv.backward_input(s.dqkv);
  } else {  // NOTE [Sub-pipelined TP]: each chunk's input gradient is reduced while the next computes
    s.dqkv = at::empty({batch, seq, 3 * local}, dy.options());
    dh = at::empty_like(dy);
    parallel::ChunkedAllReduce reduce(tp_);
    for (int64_t c = 0; c < chunks_; ++c) {
      const auto [first, rows] = parallel::chunk_rows(batch, chunks_, c);
      at::Tensor dqkv = s.dqkv.narrow(0, first, rows), dh_c = dh.narrow(0, first, rows);
      dqkv.copy_(attend_backward(first, rows));
      dh_c.copy_(qkv.backward_input_partial(dqkv));
      reduce.start(dh_c);
    }
    reduce.finish();
  }
  s.heads.reset(), s.lse.reset();
  s.norm_grads = norm.backward(dh, s.x, s.mean, s.rstd);
  s.x.reset(), s.mean.reset(), s.rstd.reset();
  at::Tensor dx = std::move(s.norm_grads.dx);
  return dx.add_(dy);  // the residual branch
}

void AttentionBlock::backward_weight(Saved& saved) {
  auto& s = saved.get<State>();
  proj.backward_weight(s.merged, s.dy);
  qkv.backward_weight(s.h, s.dqkv);
  norm.accumulate(s.norm_grads);
  saved.clear();
}

std::vector<Param*> AttentionBlock::params() {
  return {&norm.gain, &norm.bias, &qkv.weight, &qkv.bias, &proj.weight, &proj.bias};
}

// Per rank: the linears' and the attention's FLOPs shrink by tp, the norm's activations do not.
Cost AttentionBlock::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const int64_t rows = batch * seq, local = proj.local_in(), hd = local / local_heads_;
  const double linear = qkv.flops(rows) + proj.flops(rows);
  const double attention = causal_attention_flops(batch, local_heads_, seq, hd);
  Cost c;
  c.forward_flops = linear + attention;
  c.backward_input_flops = linear + 2 * attention;  // dQ, dK, dV, dP: twice the forward's matmuls
  c.backward_weight_flops = linear;
  // x and h of [rows, d_model]; q/k/v and the merged output of [rows, d_model / tp]; the lse.
  c.saved_bytes = static_cast<double>((2 * rows * d_model_ + 4 * rows * local + batch * local_heads_ * seq) * dtype_bytes);
  c.param_bytes = static_cast<double>((4 * d_model_ * local + 2 * d_model_ + 3 * local + d_model_) * dtype_bytes);
  return c;
}

}  // namespace loom::nn

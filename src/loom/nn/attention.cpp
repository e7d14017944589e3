#include "loom/nn/attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/core/error.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"

namespace loom::nn {
namespace {

// The kernels' own products: their operands are float32 on the widened path, which attention_forward
// and attention_backward widen before calling them (NOTE [bf16 products]).
constexpr Bf16Products kOwnOperands = Bf16Products::Native;

// `kernel` run on float32 operands.
AttentionKernel float32_kernel(AttentionKernel kernel) {
  kernel.products = Bf16Products::Native;
  return kernel;
}

// Gradients summed in a wide type, rounded to `type` once (themselves when already of it).
AttentionGrads narrowed(AttentionGrads g, at::ScalarType type) {
  if (g.dq.scalar_type() == type) return g;
  if (g.packed.defined()) {
    g.packed = g.packed.to(type);
    g.dq = g.packed[0], g.dk = g.packed[1], g.dv = g.packed[2];
  } else {
    g.dq = g.dq.to(type), g.dk = g.dk.to(type), g.dv = g.dv.to(type);
  }
  return g;
}

// Sets the scores of keys a query may not see to -inf. Only the first rows of a block can see
// part of it (row i sees block key j iff j <= i + shift), so the mask covers just those rows;
// it depends only on the tile width and the shift, so a call builds each one once.
class FutureMask {
 public:
  explicit FutureMask(int64_t q_offset) : q_offset_(q_offset) {}
  void apply(at::Tensor& scores, int64_t q_start, int64_t k_start) {
    const int64_t tq = scores.size(-2), tk = scores.size(-1);
    const int64_t shift = q_start + q_offset_ - k_start;
    const int64_t rows = std::clamp<int64_t>(tk - 1 - shift, 0, tq);  // rows that miss some key
    if (rows == 0) return;
    if (!mask_.defined() || mask_.size(0) != rows || mask_.size(1) != tk || shift != shift_) {
      mask_ = at::ones({rows, tk}, scores.options().dtype(at::kBool)).triu(shift + 1);
      shift_ = shift;
    }
    scores.narrow(-2, 0, rows).masked_fill_(mask_, -std::numeric_limits<double>::infinity());
  }

 private:
  int64_t q_offset_;
  int64_t shift_ = 0;
  at::Tensor mask_;
};

// NOTE [Key-major tiles]: the kernels walk the keys in tiles and, for each, take every query that
// can see at least its first key (query i sees key j iff j <= i + q_offset). Each tile's matmuls
// are then tall ([queries, tile]), few in number, and only the diagonal triangle is wasted; the
// scores of one tile are O(seq * tile), so memory stays linear in the sequence. The forward keeps
// an online softmax per query (running max, running sum, rescaled accumulator).
//
// With bfloat16 inputs (NOTE [Mixed precision]) the score and value products run in bfloat16 and
// everything else in float32: the scores are widened before the mask and softmax, the running
// statistics, the accumulator, the log-sum-exp and the gradient sums are float32, and a
// probability tile is rounded to bfloat16 only as a product's operand. With float32 or float64
// inputs every step is the plain operation in that type.
//
// The kernels work on [n, T, hd] chunks of the (batch x head) rows. Each thread takes one
// contiguous chunk and runs it with single-threaded ops: a tile's matmuls are too small to split
// across threads profitably, but independent heads are not.
void forward_chunk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor out, at::Tensor lse,
                   int64_t tile, int64_t q_offset) {
  const int64_t tq = q.size(1), tk = k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  FutureMask mask(q_offset);
  const at::Tensor qs = q * scale;  // scaled once: the score GEMMs need no extra pass
  const auto wide = q.options().dtype(wide_type(q.scalar_type()));
  at::Tensor row_max = at::full({q.size(0), tq}, -std::numeric_limits<double>::infinity(), wide);
  at::Tensor row_sum = at::zeros({q.size(0), tq}, wide);
  at::Tensor acc = at::zeros(q.sizes(), wide);
  for (int64_t ks = 0; ks < tk; ks += tile) {
    const int64_t q_lo = std::max<int64_t>(0, ks - q_offset);  // first query that sees key ks
    if (q_lo >= tq) break;
    const int64_t rows = tq - q_lo, width = std::min(tile, tk - ks);
    at::Tensor s = widen(at::bmm(qs.narrow(1, q_lo, rows), k.narrow(1, ks, width).transpose(1, 2)));
    mask.apply(s, q_lo, ks);
    at::Tensor m = row_max.narrow(1, q_lo, rows);
    const at::Tensor new_max = at::maximum(m, s.amax(-1));  // finite: every row sees key ks
    const at::Tensor correction = (m - new_max).exp_();
    const at::Tensor p = s.sub_(new_max.unsqueeze(-1)).exp_();
    row_sum.narrow(1, q_lo, rows).mul_(correction).add_(p.sum(-1));
    add_product(acc.narrow(1, q_lo, rows).mul_(correction.unsqueeze(-1)), to_type(p, v.scalar_type()),
                v.narrow(1, ks, width), kOwnOperands);
    m.copy_(new_max);
  }
  at::div_out(out, acc, row_sum.unsqueeze(-1));
  at::add_out(lse, row_max, row_sum.log_());
}

void backward_chunk(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& lse, const at::Tensor& delta, at::Tensor dq, at::Tensor dk, at::Tensor dv,
                    int64_t tile, int64_t q_offset) {
  const int64_t tq = q.size(1), tk = k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  FutureMask mask(q_offset);
  const at::Tensor qs = q * scale;
  for (int64_t ks = 0; ks < tk; ks += tile) {
    const int64_t q_lo = std::max<int64_t>(0, ks - q_offset);
    if (q_lo >= tq) break;
    const int64_t rows = tq - q_lo, width = std::min(tile, tk - ks);
    const at::Tensor qb = qs.narrow(1, q_lo, rows), dob = dout.narrow(1, q_lo, rows);
    const at::Tensor kb = k.narrow(1, ks, width), vb = v.narrow(1, ks, width);
    at::Tensor s = widen(at::bmm(qb, kb.transpose(1, 2)));
    mask.apply(s, q_lo, ks);
    const at::Tensor p = s.sub_(lse.narrow(1, q_lo, rows).unsqueeze(-1)).exp_();
    add_product(dv.narrow(1, ks, width), to_type(p, q.scalar_type()).transpose(1, 2), dob, kOwnOperands);
    // dS = P * (dP - D), with dP = dO V^T: one GEMM whose input term is -D (in the product's
    // type), or the product widened and D subtracted.
    const at::Tensor d = delta.narrow(1, q_lo, rows).unsqueeze(-1);
    at::Tensor dp = d.scalar_type() == q.scalar_type() ? at::baddbmm(d, dob, vb.transpose(1, 2), -1, 1)
                                                       : widen(at::bmm(dob, vb.transpose(1, 2))).sub_(d);
    const at::Tensor ds = to_type(p.mul_(dp), q.scalar_type());
    add_product(dq.narrow(1, q_lo, rows), ds, kb, kOwnOperands, scale);
    add_product(dk.narrow(1, ks, width), ds.transpose(1, 2), qb, kOwnOperands);  // qb carries the scale
  }
}

// Runs fn(begin, end) over contiguous chunks of n rows, one chunk per thread.
template <class Fn>
void for_each_chunk(int64_t n, const Fn& fn) {
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  at::parallel_for(0, n, (n + threads - 1) / threads, fn);
}

// [B, H, T, hd] -> [B*H, T, hd] (a view when the layout allows it).
at::Tensor rows(const at::Tensor& t) { return t.reshape({-1, t.size(-2), t.size(-1)}); }

}  // namespace

AttentionForward causal_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          int64_t tile, int64_t q_offset, AttentionOut out_type) {
  const at::Tensor q3 = rows(q), k3 = rows(k), v3 = rows(v);
  const auto out_options = out_type == AttentionOut::Wide ? q.options().dtype(wide_type(q.scalar_type())) : q.options();
  at::Tensor out = at::empty(q.sizes(), out_options);
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(wide_type(q.scalar_type())));
  at::Tensor out3 = rows(out), lse2 = lse.view({-1, q.size(2)});
  for_each_chunk(q3.size(0), [&](int64_t b, int64_t e) {
    forward_chunk(q3.narrow(0, b, e - b), k3.narrow(0, b, e - b), v3.narrow(0, b, e - b), out3.narrow(0, b, e - b),
                  lse2.narrow(0, b, e - b), tile, q_offset);
  });
  return {out, lse};
}

AttentionGrads causal_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                         int64_t tile, int64_t q_offset) {
  // The sums over tiles accumulate in the wide type and are rounded to q's type at the end.
  const auto wide = q.options().dtype(wide_type(q.scalar_type()));
  AttentionGrads g;
  if (q.sizes() == k.sizes()) {
    g.packed = at::zeros({3, q.size(0), q.size(1), q.size(2), q.size(3)}, wide);
    g.dq = g.packed[0], g.dk = g.packed[1], g.dv = g.packed[2];
  } else {
    g.dq = at::zeros(q.sizes(), wide), g.dk = at::zeros(k.sizes(), wide), g.dv = at::zeros(v.sizes(), wide);
  }
  // D_i = sum_d dO_id O_id
  const at::Tensor delta = (widen(dout) * widen(out)).sum(-1).reshape({-1, q.size(2)});
  const at::Tensor do3 = rows(dout), q3 = rows(q), k3 = rows(k), v3 = rows(v), lse2 = lse.reshape({-1, q.size(2)});
  at::Tensor dq3 = rows(g.dq), dk3 = rows(g.dk), dv3 = rows(g.dv);
  for_each_chunk(q3.size(0), [&](int64_t b, int64_t e) {
    auto chunk = [&](const at::Tensor& t) { return t.narrow(0, b, e - b); };
    backward_chunk(chunk(do3), chunk(q3), chunk(k3), chunk(v3), chunk(lse2), chunk(delta), chunk(dq3), chunk(dk3),
                   chunk(dv3), tile, q_offset);
  });
  return narrowed(std::move(g), q.scalar_type());
}

namespace {

// NOTE [Attention kernels] on a GPU: libtorch's memory-efficient CUDA attention, for float32 and
// bfloat16 with heads of a multiple of 8 (its aligned kernel); float64 runs the tiled kernel, the
// exact core. Its log-sum-exp (float32, natural log) has a row per query padded to a multiple of
// 32 queries: the first ones are returned, and the padding is put back for its backward.
constexpr int64_t kLseAlign = 32;

AttentionForward efficient_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  auto [out, lse, seed, offset] = at::_scaled_dot_product_efficient_attention(
      q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/true, /*dropout_p=*/0.0, /*is_causal=*/true);
  return {std::move(out), lse.narrow(2, 0, q.size(2)).contiguous()};
}

AttentionGrads efficient_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse) {
  const int64_t tq = q.size(2), padded = (tq + kLseAlign - 1) / kLseAlign * kLseAlign;
  at::Tensor lse_padded = at::zeros({lse.size(0), lse.size(1), padded}, lse.options().dtype(at::kFloat));
  lse_padded.narrow(2, 0, tq).copy_(lse);
  const at::Tensor no_dropout = at::zeros({}, at::kLong);  // the random state a dropout would replay
  auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
      dout.contiguous(), q, k, v, /*attn_bias=*/at::Tensor(), out, lse_padded, no_dropout, no_dropout,
      /*dropout_p=*/0.0, /*grad_input_mask=*/{true, true, true, false}, /*is_causal=*/true);
  AttentionGrads g;
  g.dq = std::move(dq), g.dk = std::move(dk), g.dv = std::move(dv);
  return g;
}

}  // namespace

namespace {

// NOTE [bf16 products]: attention on the widened path is the float32 kernel over blocks of the
// (batch x head) rows, each block's operands widened and its results rounded once to bfloat16
// (the output kept float32 for a partial one), so its float32 copies stay within 16 MiB whatever
// the sequence. Rows are independent: the blocks change no sum.
struct Rows {
  at::Tensor t;  // [B x H, T, hd]
  explicit Rows(const at::Tensor& x) : t(x.reshape({-1, x.size(2), x.size(3)})) {}
  at::Tensor wide(int64_t r, int64_t n) const { return t.narrow(0, r, n).to(at::kFloat).unsqueeze(0); }
};

// Calls fn(first row, rows) over the blocks of `n` rows whose q, k and v rows hold `row_elements`.
template <class Fn>
void over_blocks(int64_t n, int64_t row_elements, Fn fn) {
  const int64_t each = widened_block_rows(row_elements);
  for (int64_t r = 0; r < n; r += each) fn(r, std::min(each, n - r));
}

AttentionForward widened_forward(const AttentionKernel& kernel, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, int64_t q_offset, AttentionOut out_type) {
  const Rows q3(q), k3(k), v3(v);
  const int64_t n = q3.t.size(0), tq = q.size(2), hd = q.size(3);
  LOOM_CHECK(k3.t.size(0) == n, "[attention] keys of {} rows for queries of {} (expand the kv heads first)", k3.t.size(0), n);
  const at::ScalarType type = out_type == AttentionOut::InputType ? q.scalar_type() : at::kFloat;
  at::Tensor out = at::empty({n, tq, hd}, q.options().dtype(type));
  at::Tensor lse = at::empty({n, tq}, q.options().dtype(at::kFloat));
  over_blocks(n, (tq + 2 * k.size(2)) * hd, [&](int64_t r, int64_t rows) {
    const AttentionForward f = attention_forward(float32_kernel(kernel), q3.wide(r, rows), k3.wide(r, rows),
                                                 v3.wide(r, rows), q_offset);
    out.narrow(0, r, rows).copy_(f.out.squeeze(0));
    lse.narrow(0, r, rows).copy_(f.lse.reshape({rows, tq}));
  });
  return {out.view(q.sizes()), lse.view({q.size(0), q.size(1), tq})};
}

AttentionGrads widened_backward(const AttentionKernel& kernel, const at::Tensor& dout, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                int64_t q_offset) {
  const Rows do3(dout), q3(q), k3(k), v3(v), out3(out);
  const at::Tensor lse3 = lse.reshape({-1, 1, q.size(2)});
  const int64_t n = q3.t.size(0), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  AttentionGrads g;
  if (q.sizes() == k.sizes()) {
    g.packed = at::empty({3, q.size(0), q.size(1), tq, hd}, q.options());
    g.dq = g.packed[0], g.dk = g.packed[1], g.dv = g.packed[2];
  } else {
    g.dq = at::empty(q.sizes(), q.options()), g.dk = at::empty(k.sizes(), q.options()), g.dv = at::empty(v.sizes(), q.options());
  }
  const at::Tensor dq3 = g.dq.view({n, tq, hd}), dk3 = g.dk.view({n, tk, hd}), dv3 = g.dv.view({n, tk, hd});
  over_blocks(n, (3 * tq + 2 * tk) * hd, [&](int64_t r, int64_t rows) {
    const AttentionGrads b = attention_backward(float32_kernel(kernel), do3.wide(r, rows), q3.wide(r, rows),
                                                k3.wide(r, rows), v3.wide(r, rows), out3.wide(r, rows),
                                                lse3.narrow(0, r, rows).reshape({1, rows, tq}), q_offset);
    dq3.narrow(0, r, rows).copy_(b.dq.squeeze(0));
    dk3.narrow(0, r, rows).copy_(b.dk.squeeze(0));
    dv3.narrow(0, r, rows).copy_(b.dv.squeeze(0));
  });
  return g;
}

}  // namespace

bool runs_fused(const AttentionKernel& kernel, const at::Tensor& q, const at::Tensor& k, int64_t q_offset,
                AttentionOut out_type) {
  const at::ScalarType t = q.scalar_type();
  if (kernel.kind != AttnKernel::Fused || q_offset != 0 || q.size(2) != k.size(2) || out_type != AttentionOut::InputType)
    return false;
  if (q.is_cuda()) return (t == at::kFloat || t == at::kBFloat16) && q.size(3) % 8 == 0;
  return q.device().is_cpu() && (t == at::kFloat || t == at::kDouble || t == at::kBFloat16);
}

AttentionForward attention_forward(const AttentionKernel& kernel, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, int64_t q_offset, AttentionOut out_type) {
  if (widens(kernel.products, q)) return widened_forward(kernel, q, k, v, q_offset, out_type);
  if (!runs_fused(kernel, q, k, q_offset, out_type))
    return causal_attention_forward(q, k, v, kernel.tile, q_offset, out_type);
  if (q.is_cuda()) return efficient_forward(q, k, v);
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, /*dropout_p=*/0.0, /*is_causal=*/true);
  return {std::move(out), std::move(lse)};
}

AttentionGrads attention_backward(const AttentionKernel& kernel, const at::Tensor& dout, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                  const at::Tensor& lse, int64_t q_offset) {
  if (widens(kernel.products, q)) return widened_backward(kernel, dout, q, k, v, out, lse, q_offset);
  if (!runs_fused(kernel, q, k, q_offset)) return causal_attention_backward(dout, q, k, v, out, lse, kernel.tile, q_offset);
  if (q.is_cuda()) return efficient_backward(dout, q, k, v, out, lse);
  auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse,
                                                                               /*dropout_p=*/0.0, /*is_causal=*/true);
  AttentionGrads g;
  g.dq = std::move(dq), g.dk = std::move(dk), g.dv = std::move(dv);
  return g;
}

double causal_attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim) {
  // Two matmuls of 2 * seq * seq * head_dim each, of which the causal half is used.
  return 2.0 * static_cast<double>(batch * heads) * static_cast<double>(seq) * static_cast<double>(seq + 1) *
         static_cast<double>(head_dim);
}

double causal_attention_score_bytes(int64_t batch, int64_t heads, int64_t seq, int64_t dtype_bytes) {
  // Per score element, forward_chunk's passes: the product written (a bytes) and widened (read a,
  // write 4; none when a = 4 it still costs the pass), its row maximum (read 4), subtract and exp
  // in place (read 4, write 4), the row sum (read 4), narrowed to the product type (read 4, write
  // a) and read by the second product (a): 4a + 24. The backward moves about twice that.
  const double elements = static_cast<double>(batch * heads) * static_cast<double>(seq) * static_cast<double>(seq + 1) / 2;
  return elements * static_cast<double>(4 * dtype_bytes + 24);
}

}  // namespace loom::nn

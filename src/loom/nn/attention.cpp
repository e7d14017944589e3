#include "loom/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::nn {
namespace {

// Sets the scores of keys a query may not see to -inf; a no-op for tiles fully in the past.
void mask_future(at::Tensor& scores, int64_t q_start, int64_t k_start, int64_t q_offset) {
  const int64_t tq = scores.size(-2), tk = scores.size(-1);
  if (k_start + tk - 1 <= q_start + q_offset) return;
  const auto opts = at::TensorOptions().dtype(at::kLong);
  const at::Tensor rows = at::arange(q_start + q_offset, q_start + q_offset + tq, opts).unsqueeze(1);
  const at::Tensor cols = at::arange(k_start, k_start + tk, opts).unsqueeze(0);
  scores.masked_fill_(cols > rows, -std::numeric_limits<double>::infinity());
}

// Keys visible to any query of the tile [q_start, q_end).
int64_t visible_keys(int64_t q_end, int64_t q_offset, int64_t key_count) {
  return std::clamp<int64_t>(q_end + q_offset, 0, key_count);
}

}  // namespace

AttentionForward causal_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          int64_t tile, int64_t q_offset) {
  const int64_t tq_all = q.size(2), tk_all = k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(1), tq_all}, q.options());
  for (int64_t qs = 0; qs < tq_all; qs += tile) {
    const int64_t qe = std::min(qs + tile, tq_all);
    const at::Tensor qb = q.narrow(2, qs, qe - qs) * scale;
    const int64_t kend = visible_keys(qe, q_offset, tk_all);
    at::Tensor row_max, row_sum, acc;
    for (int64_t ks = 0; ks < kend; ks += tile) {
      const int64_t ke = std::min(ks + tile, kend);
      at::Tensor s = at::matmul(qb, k.narrow(2, ks, ke - ks).transpose(2, 3));
      mask_future(s, qs, ks, q_offset);
      const at::Tensor block_max = std::get<0>(s.max(-1));
      if (!acc.defined()) {
        row_max = block_max;
        at::Tensor p = (s - row_max.unsqueeze(-1)).exp_();
        row_sum = p.sum(-1);
        acc = at::matmul(p, v.narrow(2, ks, ke - ks));
        continue;
      }
      const at::Tensor new_max = at::maximum(row_max, block_max);
      const at::Tensor correction = (row_max - new_max).exp_();
      at::Tensor p = (s - new_max.unsqueeze(-1)).exp_();
      row_sum = row_sum * correction + p.sum(-1);
      acc = acc * correction.unsqueeze(-1) + at::matmul(p, v.narrow(2, ks, ke - ks));
      row_max = new_max;
    }
    out.narrow(2, qs, qe - qs).copy_(acc / row_sum.unsqueeze(-1));
    lse.narrow(2, qs, qe - qs).copy_(row_max + row_sum.log());
  }
  return {out, lse};
}

AttentionGrads causal_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                         int64_t tile, int64_t q_offset) {
  const int64_t tq_all = q.size(2), tk_all = k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  AttentionGrads g;
  if (tq_all == tk_all) {
    g.packed = at::zeros({3, q.size(0), q.size(1), tq_all, q.size(3)}, q.options());
    g.dq = g.packed[0], g.dk = g.packed[1], g.dv = g.packed[2];
  } else {
    g.dq = at::zeros_like(q), g.dk = at::zeros_like(k), g.dv = at::zeros_like(v);
  }
  const at::Tensor delta = (dout * out).sum(-1);  // D_i = sum_d dO_id O_id
  for (int64_t qs = 0; qs < tq_all; qs += tile) {
    const int64_t qe = std::min(qs + tile, tq_all), tq = qe - qs;
    const at::Tensor qb = q.narrow(2, qs, tq) * scale;
    const at::Tensor dob = dout.narrow(2, qs, tq);
    const at::Tensor lse_b = lse.narrow(2, qs, tq).unsqueeze(-1);
    const at::Tensor delta_b = delta.narrow(2, qs, tq).unsqueeze(-1);
    at::Tensor dq_b = g.dq.narrow(2, qs, tq);
    const int64_t kend = visible_keys(qe, q_offset, tk_all);
    for (int64_t ks = 0; ks < kend; ks += tile) {
      const int64_t ke = std::min(ks + tile, kend), tk = ke - ks;
      const at::Tensor kb = k.narrow(2, ks, tk), vb = v.narrow(2, ks, tk);
      at::Tensor s = at::matmul(qb, kb.transpose(2, 3));
      mask_future(s, qs, ks, q_offset);
      const at::Tensor p = s.sub_(lse_b).exp_();
      g.dv.narrow(2, ks, tk).add_(at::matmul(p.transpose(2, 3), dob));
      const at::Tensor ds = p.mul_(at::matmul(dob, vb.transpose(2, 3)).sub_(delta_b));  // P * (dP - D)
      dq_b.add_(at::matmul(ds, kb), scale);
      g.dk.narrow(2, ks, tk).add_(at::matmul(ds.transpose(2, 3), qb));  // qb already carries `scale`
    }
  }
  return g;
}

double causal_attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim) {
  // Two matmuls of 2 * seq * seq * head_dim each, of which the causal half is used.
  return 2.0 * static_cast<double>(batch * heads) * static_cast<double>(seq) * static_cast<double>(seq + 1) *
         static_cast<double>(head_dim);
}

}  // namespace loom::nn

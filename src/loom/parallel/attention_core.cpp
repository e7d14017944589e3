#include "loom/parallel/attention_core.h"

#include "loom/core/error.h"
#include "loom/nn/attention.h"
#include "loom/nn/grouped_heads.h"
#include "loom/nn/precision.h"

namespace loom::parallel {

void AttentionSaved::for_each_tensor(const nn::TensorVisitor& visit) {
  visit("q", q), visit("k", k), visit("v", v), visit("lse", lse), visit("out", out);
}

namespace {

int64_t groups_of(const at::Tensor& q, const at::Tensor& k) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             "[attention] {} query heads do not share {} key/value heads in equal groups", q.size(1), k.size(1));
  return q.size(1) / k.size(1);
}

// The kernel (NOTE [Attention kernels]) on k and v expanded to the query heads (a no-op without
// grouping).
nn::AttentionForward grouped_forward(const nn::AttentionKernel& kernel, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, int64_t q_offset,
                                     nn::AttentionOut out_type = nn::AttentionOut::InputType) {
  const int64_t g = groups_of(q, k);
  return nn::attention_forward(kernel, q, nn::expand_kv_heads(k, g), nn::expand_kv_heads(v, g), q_offset, out_type);
}

// Its backward; dk and dv summed back onto the kv heads.
AttentionInputGrads grouped_backward(const nn::AttentionKernel& kernel, const at::Tensor& dout, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                     const at::Tensor& lse, int64_t q_offset) {
  const int64_t g = groups_of(q, k);
  nn::AttentionGrads grads = nn::attention_backward(kernel, dout, q, nn::expand_kv_heads(k, g),
                                                    nn::expand_kv_heads(v, g), out, lse, q_offset);
  return {grads.dq, nn::reduce_kv_heads(grads.dk, g), nn::reduce_kv_heads(grads.dv, g)};
}

class LocalCore final : public AttentionCore {
 public:
  explicit LocalCore(const nn::AttentionKernel& kernel) : kernel_(kernel) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionSaved& saved) override {
    nn::AttentionForward att = grouped_forward(kernel_, q, k, v, 0);
    saved.q = q, saved.k = k, saved.v = v, saved.lse = att.lse;
    return att.out;
  }
  AttentionInputGrads backward(const at::Tensor& dout, const at::Tensor& out, const AttentionSaved& s) override {
    return grouped_backward(kernel_, dout, s.q, s.k, s.v, out, s.lse, 0);
  }

 private:
  nn::AttentionKernel kernel_;
};

// The local queries against the keys of this and every earlier segment (q_offset places them).
class AllGatherCore final : public AttentionCore {
 public:
  AllGatherCore(dist::Communicator& sp, const nn::AttentionKernel& kernel) : sp_(sp), kernel_(kernel) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionSaved& saved) override {
    const at::Tensor kv = gather_visible_kv(sp_, at::stack({k, v}));
    nn::AttentionForward att = grouped_forward(kernel_, q, kv[0], kv[1], sp_.rank() * q.size(2));
    saved.q = q, saved.k = k, saved.v = v, saved.lse = att.lse;
    return att.out;
  }
  // The visible keys again (rather than keeping them); their gradients go back to their owners.
  AttentionInputGrads backward(const at::Tensor& dout, const at::Tensor& out, const AttentionSaved& s) override {
    const at::Tensor kv = gather_visible_kv(sp_, at::stack({s.k, s.v}));
    AttentionInputGrads g = grouped_backward(kernel_, dout, s.q, kv[0], kv[1], out, s.lse, sp_.rank() * s.q.size(2));
    const at::Tensor dkv = reduce_scatter_visible_kv(sp_, at::stack({g.dk, g.dv}));
    return {g.dq, dkv[0], dkv[1]};
  }

  int64_t sequence_ranks() const override { return sp_.size(); }
  // The fused k/v all-gather (again in backward), and the dk/dv reduce-scatter.
  std::vector<nn::CommUse> comm(int64_t batch, int64_t, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                                int64_t dtype_bytes) const override {
    const double all = static_cast<double>(2 * batch * kv_heads * tokens * head_dim * dtype_bytes * sp_.size());
    using nn::CommOp, nn::CommPass;
    return {{.op = CommOp::AllGather, .axis = nn::CommAxis::Sp, .pass = CommPass::Forward, .bytes = all},
            {.op = CommOp::AllGather, .axis = nn::CommAxis::Sp, .pass = CommPass::BackwardInput, .bytes = all},
            {.op = CommOp::ReduceScatter, .axis = nn::CommAxis::Sp, .pass = CommPass::BackwardInput, .bytes = all}};
  }

 private:
  dist::Communicator& sp_;
  nn::AttentionKernel kernel_;
};

// The whole sequence of heads/sp query heads (and Hkv/sp kv heads), and back.
class UlyssesCore final : public AttentionCore {
 public:
  UlyssesCore(dist::Communicator& sp, const nn::AttentionKernel& kernel) : sp_(sp), kernel_(kernel) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionSaved& saved) override {
    const std::vector<at::Tensor> heads = segments_to_heads(sp_, {q, k, v});
    nn::AttentionForward att = grouped_forward(kernel_, heads[0], heads[1], heads[2], 0);
    saved.q = heads[0], saved.k = heads[1], saved.v = heads[2], saved.lse = att.lse, saved.out = att.out;
    return heads_to_segments(sp_, {att.out})[0];
  }
  AttentionInputGrads backward(const at::Tensor& dout, const at::Tensor&, const AttentionSaved& s) override {
    const at::Tensor dout_heads = segments_to_heads(sp_, {dout})[0];
    AttentionInputGrads g = grouped_backward(kernel_, dout_heads, s.q, s.k, s.v, s.out, s.lse, 0);
    std::vector<at::Tensor> back = heads_to_segments(sp_, {g.dq, g.dk, g.dv});
    return {back[0], back[1], back[2]};
  }
  bool keeps_output() const override { return true; }

  int64_t sequence_ranks() const override { return sp_.size(); }
  // q, k, v to heads and the output back in forward; dout to heads and dq, dk, dv back in backward.
  std::vector<nn::CommUse> comm(int64_t batch, int64_t heads, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                                int64_t dtype_bytes) const override {
    const auto bytes = [&](int64_t h) { return static_cast<double>(batch * h * tokens * head_dim * dtype_bytes); };
    using nn::CommOp, nn::CommPass;
    const nn::CommAxis sp = nn::CommAxis::Sp;
    return {{.op = CommOp::AllToAll, .axis = sp, .pass = CommPass::Forward, .bytes = bytes(heads + 2 * kv_heads)},
            {.op = CommOp::AllToAll, .axis = sp, .pass = CommPass::Forward, .bytes = bytes(heads)},
            {.op = CommOp::AllToAll, .axis = sp, .pass = CommPass::BackwardInput, .bytes = bytes(heads)},
            {.op = CommOp::AllToAll, .axis = sp, .pass = CommPass::BackwardInput, .bytes = bytes(heads + 2 * kv_heads)}};
  }

 private:
  dist::Communicator& sp_;
  nn::AttentionKernel kernel_;
};

constexpr int kRingForwardTag = 1001, kRingBackwardTag = 1002, kRingGradientTag = 1003;

// The global chunk index of local chunk c (0 or 1) of rank `owner` in the balanced ring.
int64_t ring_chunk(int64_t owner, int64_t c, int64_t n) { return c == 0 ? owner : 2 * n - 1 - owner; }

// Sends `mine` to the next rank and receives the previous rank's into `next`, non-blocking.
std::pair<dist::WorkPtr, dist::WorkPtr> rotate(dist::Communicator& sp, const at::Tensor& mine, at::Tensor& next,
                                               int tag) {
  const int n = sp.size(), r = sp.rank();
  auto recv = sp.recv_async(next, (r + n - 1) % n, tag);
  auto send = sp.send_async(mine, (r + 1) % n, tag);
  return {std::move(send), std::move(recv)};
}

// Calls fn(qc, kc, q_offset) for each local query chunk qc and chunk kc of `owner`'s block that
// it can see (a later chunk is entirely in the future); q_offset places the queries.
template <class Fn>
void for_visible_chunks(int64_t rank, int64_t owner, int64_t n, int64_t length, Fn&& fn) {
  for (int64_t qc = 0; qc < 2; ++qc) {
    const int64_t gq = ring_chunk(rank, qc, n);
    for (int64_t kc = 0; kc < 2; ++kc) {
      const int64_t gk = ring_chunk(owner, kc, n);
      if (gk <= gq) fn(qc, kc, (gq - gk) * length);
    }
  }
}

at::Tensor chunk_of(const at::Tensor& t, int64_t c, int64_t length) {
  return t.narrow(2, c * length, length).contiguous();
}

// k and v blocks [2, B, Hkv, Ts, hd] travel around the ring while the current one is computed;
// each query chunk's partial results merge by log-sum-exp. In backward each block's share of dq,
// dk, dv is exact given the final out and lse, so dk and dv travel with their block until home.
class RingCore final : public AttentionCore {
 public:
  RingCore(dist::Communicator& sp, const nn::AttentionKernel& kernel) : sp_(sp), kernel_(kernel) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionSaved& saved) override;
  AttentionInputGrads backward(const at::Tensor& dout, const at::Tensor& out, const AttentionSaved& s) override;

  int64_t sequence_ranks() const override { return sp_.size(); }
  // sp - 1 steps of this rank's k/v block around the ring beside the compute; backward moves the
  // block and its dk/dv.
  std::vector<nn::CommUse> comm(int64_t batch, int64_t, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                                int64_t dtype_bytes) const override {
    const double block = static_cast<double>(2 * batch * kv_heads * tokens * head_dim * dtype_bytes);
    const int64_t steps = sp_.size() - 1;
    using nn::CommOp, nn::CommPass;
    const nn::CommAxis sp = nn::CommAxis::Sp;
    return {{.op = CommOp::SendRecv, .axis = sp, .pass = CommPass::Forward, .bytes = block, .count = steps, .overlapped = true},
            {.op = CommOp::SendRecv, .axis = sp, .pass = CommPass::BackwardInput, .bytes = 2 * block, .count = steps,
             .overlapped = true}};
  }

 private:
  dist::Communicator& sp_;
  nn::AttentionKernel kernel_;
};

at::Tensor RingCore::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionSaved& saved) {
  const int64_t n = sp_.size(), r = sp_.rank(), tc = q.size(2) / 2;
  LOOM_CHECK(q.size(2) % 2 == 0, "[sp] ring: {} tokens are not two equal chunks", q.size(2));
  at::Tensor block = at::stack({k, v});  // the k and v this rank holds now
  const at::Tensor q_chunks[2] = {chunk_of(q, 0, tc), chunk_of(q, 1, tc)};
  at::Tensor out[2], lse[2];
  for (int64_t step = 0; step < n; ++step) {
    at::Tensor next;
    std::pair<dist::WorkPtr, dist::WorkPtr> exchange;
    if (step + 1 < n) {  // the next block travels while this one is computed
      next = at::empty_like(block);
      exchange = rotate(sp_, block, next, kRingForwardTag);
    }
    for_visible_chunks(r, (r - step + n) % n, n, tc, [&](int64_t qc, int64_t kc, int64_t offset) {
      // Partials in the wide type, merged there and rounded once (NOTE [Mixed precision]).
      auto part = grouped_forward(kernel_, q_chunks[qc], chunk_of(block[0], kc, tc), chunk_of(block[1], kc, tc), offset,
                                  nn::AttentionOut::Wide);
      if (!out[qc].defined()) {
        out[qc] = part.out, lse[qc] = part.lse;
        return;
      }
      // Online softmax across blocks: weight both parts by their share of the merged sum.
      const at::Tensor merged = at::logaddexp(lse[qc], part.lse);
      out[qc] = out[qc] * (lse[qc] - merged).exp_().unsqueeze(-1) + part.out * (part.lse - merged).exp_().unsqueeze(-1);
      lse[qc] = merged;
    });
    if (step + 1 < n) {
      exchange.first->wait();
      exchange.second->wait();
      block = next;
    }
  }
  saved.q = q, saved.k = k, saved.v = v, saved.lse = at::cat({lse[0], lse[1]}, 2);
  return nn::to_type(at::cat({out[0], out[1]}, 2), q.scalar_type());
}

AttentionInputGrads RingCore::backward(const at::Tensor& dout, const at::Tensor& out, const AttentionSaved& s) {
  const int64_t n = sp_.size(), r = sp_.rank(), tc = s.q.size(2) / 2;
  at::Tensor block = at::stack({s.k, s.v});
  // dk, dv of the block held now; travels with it. Both sums accumulate in the wide type.
  const auto wide = block.options().dtype(nn::wide_type(block.scalar_type()));
  at::Tensor grads = at::zeros(block.sizes(), wide);
  at::Tensor dq = at::zeros(s.q.sizes(), wide);
  at::Tensor q_chunks[2], dout_chunks[2], out_chunks[2], lse_chunks[2];
  for (int64_t c = 0; c < 2; ++c) {
    q_chunks[c] = chunk_of(s.q, c, tc), dout_chunks[c] = chunk_of(dout, c, tc), out_chunks[c] = chunk_of(out, c, tc);
    lse_chunks[c] = s.lse.narrow(2, c * tc, tc).contiguous();
  }
  for (int64_t step = 0; step < n; ++step) {
    at::Tensor next;
    std::pair<dist::WorkPtr, dist::WorkPtr> exchange;
    if (step + 1 < n) {
      next = at::empty_like(block);
      exchange = rotate(sp_, block, next, kRingBackwardTag);
    }
    for_visible_chunks(r, (r - step + n) % n, n, tc, [&](int64_t qc, int64_t kc, int64_t offset) {
      AttentionInputGrads g = grouped_backward(kernel_, dout_chunks[qc], q_chunks[qc], chunk_of(block[0], kc, tc),
                                               chunk_of(block[1], kc, tc), out_chunks[qc], lse_chunks[qc], offset);
      dq.narrow(2, qc * tc, tc).add_(g.dq);
      grads[0].narrow(2, kc * tc, tc).add_(g.dk);
      grads[1].narrow(2, kc * tc, tc).add_(g.dv);
    });
    // The block's gradients move on with it; after a full turn they are back at their owner.
    at::Tensor arrived = at::empty_like(grads);
    auto pass = rotate(sp_, grads, arrived, kRingGradientTag);
    pass.first->wait();
    pass.second->wait();
    grads = arrived;
    if (step + 1 < n) {
      exchange.first->wait();
      exchange.second->wait();
      block = next;
    }
  }
  const auto type = s.q.scalar_type();
  return {nn::to_type(dq, type), nn::to_type(grads[0], type), nn::to_type(grads[1], type)};
}

}  // namespace

std::unique_ptr<AttentionCore> make_attention_core(const SpOptions& sp, const nn::AttentionKernel& kernel) {
  if (!sp.active()) return std::make_unique<LocalCore>(kernel);
  switch (sp.mode) {
    case SpMode::AllGather: return std::make_unique<AllGatherCore>(*sp.sp, kernel);
    case SpMode::Ring: return std::make_unique<RingCore>(*sp.sp, kernel);
    case SpMode::Ulysses: return std::make_unique<UlyssesCore>(*sp.sp, kernel);
  }
  LOOM_CHECK(false, "[sp] unknown sequence-parallel mode");
  return nullptr;
}

}  // namespace loom::parallel

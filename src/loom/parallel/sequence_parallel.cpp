#include "loom/parallel/sequence_parallel.h"

#include "loom/core/error.h"
#include "loom/nn/attention.h"

namespace loom::parallel {

SpMode sp_mode_of(const std::string& name) {
  if (name == "ring") return SpMode::Ring;
  if (name == "ulysses") return SpMode::Ulysses;
  LOOM_CHECK_INPUT(name == "allgather", "parallel.sp_mode = \"{}\" is not one of: allgather, ring, ulysses", name);
  return SpMode::AllGather;
}

std::vector<int64_t> sequence_chunks(const SpOptions& sp) {
  if (!sp.active()) return {0};
  const int64_t r = sp.sp->rank(), n = sp.sp->size();
  if (sp.mode == SpMode::Ring) return {r, 2 * n - 1 - r};
  return {r};
}

nn::MicroBatch local_segments(const nn::MicroBatch& mb, const SpOptions& sp) {
  if (!sp.active()) return mb;
  const std::vector<int64_t> chunks = sequence_chunks(sp);
  const int64_t length = mb.tokens.size(1) / (sp.sp->size() * static_cast<int64_t>(chunks.size()));
  auto mine = [&](const at::Tensor& t) {
    std::vector<at::Tensor> parts;
    for (int64_t c : chunks) parts.push_back(t.narrow(1, c * length, length));
    return at::cat(parts, 1);
  };
  nn::MicroBatch out = mb;
  out.tokens = mine(mb.tokens), out.targets = mine(mb.targets);
  return out;
}

namespace {

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

}  // namespace

RingAttention ring_attention_forward(dist::Communicator& sp, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, int64_t tile) {
  const int64_t n = sp.size(), r = sp.rank(), tc = q.size(2) / 2;
  LOOM_CHECK(q.size(2) % 2 == 0, "[sp] ring: {} tokens are not two equal chunks", q.size(2));
  at::Tensor block = at::stack({k, v});  // [2, B, H, Ts, hd]: the k and v this rank holds now
  const at::Tensor q_chunks[2] = {chunk_of(q, 0, tc), chunk_of(q, 1, tc)};
  at::Tensor out[2], lse[2];
  for (int64_t step = 0; step < n; ++step) {
    at::Tensor next;
    std::pair<dist::WorkPtr, dist::WorkPtr> exchange;
    if (step + 1 < n) {  // the next block travels while this one is computed
      next = at::empty_like(block);
      exchange = rotate(sp, block, next, kRingForwardTag);
    }
    for_visible_chunks(r, (r - step + n) % n, n, tc, [&](int64_t qc, int64_t kc, int64_t offset) {
      auto part = nn::causal_attention_forward(q_chunks[qc], chunk_of(block[0], kc, tc), chunk_of(block[1], kc, tc),
                                               tile, offset);
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
  return {at::cat({out[0], out[1]}, 2), at::cat({lse[0], lse[1]}, 2)};
}

at::Tensor ring_attention_backward(dist::Communicator& sp, const at::Tensor& dout, const at::Tensor& q,
                                   const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                   const at::Tensor& lse, int64_t tile) {
  const int64_t n = sp.size(), r = sp.rank(), tc = q.size(2) / 2;
  at::Tensor block = at::stack({k, v});
  at::Tensor grads = at::zeros_like(block);  // dk, dv of the block held now; travels with it
  at::Tensor dq = at::zeros_like(q);
  at::Tensor q_chunks[2], dout_chunks[2], out_chunks[2], lse_chunks[2];
  for (int64_t c = 0; c < 2; ++c) {
    q_chunks[c] = chunk_of(q, c, tc), dout_chunks[c] = chunk_of(dout, c, tc), out_chunks[c] = chunk_of(out, c, tc);
    lse_chunks[c] = lse.narrow(2, c * tc, tc).contiguous();
  }
  for (int64_t step = 0; step < n; ++step) {
    at::Tensor next;
    std::pair<dist::WorkPtr, dist::WorkPtr> exchange;
    if (step + 1 < n) {
      next = at::empty_like(block);
      exchange = rotate(sp, block, next, kRingBackwardTag);
    }
    for_visible_chunks(r, (r - step + n) % n, n, tc, [&](int64_t qc, int64_t kc, int64_t offset) {
      // With the final out and lse each block's share of the gradients is exact on its own.
      auto g = nn::causal_attention_backward(dout_chunks[qc], q_chunks[qc], chunk_of(block[0], kc, tc),
                                             chunk_of(block[1], kc, tc), out_chunks[qc], lse_chunks[qc], tile, offset);
      dq.narrow(2, qc * tc, tc).add_(g.dq);
      grads[0].narrow(2, kc * tc, tc).add_(g.dk);
      grads[1].narrow(2, kc * tc, tc).add_(g.dv);
    });
    // The block's gradients move on with it; after a full turn they are back at their owner.
    at::Tensor arrived = at::empty_like(grads);
    auto pass = rotate(sp, grads, arrived, kRingGradientTag);
    pass.first->wait();
    pass.second->wait();
    grads = arrived;
    if (step + 1 < n) {
      exchange.first->wait();
      exchange.second->wait();
      block = next;
    }
  }
  return at::stack({dq, grads[0], grads[1]});
}

at::Tensor gather_visible_kv(dist::Communicator& sp, const at::Tensor& kv) {
  LOOM_CHECK(kv.dim() == 5 && kv.size(0) == 2, "[sp] k and v travel as [2, B, H, T, hd]");
  const int64_t n = sp.size(), visible = sp.rank() + 1, ts = kv.size(3);
  std::vector<int64_t> shape = kv.sizes().vec();
  shape.insert(shape.begin(), n);
  at::Tensor all = at::empty(shape, kv.options());  // [sp, 2, B, H, Ts, hd]
  sp.all_gather(kv.contiguous(), all);
  // [r+1, 2, B, H, Ts, hd] -> [2, B, H, r+1, Ts, hd] -> [2, B, H, (r+1) Ts, hd]
  return all.narrow(0, 0, visible)
      .permute({1, 2, 3, 0, 4, 5})
      .reshape({2, kv.size(1), kv.size(2), visible * ts, kv.size(4)});
}

at::Tensor reduce_scatter_visible_kv(dist::Communicator& sp, const at::Tensor& dkv) {
  const int64_t n = sp.size(), visible = sp.rank() + 1, ts = dkv.size(3) / visible;
  LOOM_CHECK(dkv.dim() == 5 && dkv.size(0) == 2 && dkv.size(3) == visible * ts,
             "[sp] dk and dv travel as [2, B, H, (r+1) Ts, hd]");
  const int64_t b = dkv.size(1), h = dkv.size(2), hd = dkv.size(4);
  // Segment-major blocks for every rank; the segments this rank cannot see contribute zeros.
  at::Tensor blocks = at::zeros({n, 2, b, h, ts, hd}, dkv.options());
  blocks.narrow(0, 0, visible).copy_(dkv.view({2, b, h, visible, ts, hd}).permute({3, 0, 1, 2, 4, 5}));
  at::Tensor mine = at::empty({2, b, h, ts, hd}, dkv.options());
  sp.reduce_scatter(blocks, mine, dist::ReduceOp::Sum);
  return mine;
}

at::Tensor segments_to_heads(dist::Communicator& sp, const at::Tensor& x) {
  const int64_t n = sp.size(), g = x.size(0), b = x.size(1), h = x.size(2), ts = x.size(3), hd = x.size(4);
  LOOM_CHECK(x.dim() == 5 && h % n == 0, "[sp] ulysses: {} heads do not split over sp = {}", h, n);
  // Block r (sent to rank r) is head group r of this segment.
  const at::Tensor send = x.reshape({g, b, n, h / n, ts, hd}).permute({2, 0, 1, 3, 4, 5}).contiguous();
  at::Tensor recv = at::empty_like(send);  // block j: segment j of this rank's heads
  sp.all_to_all(send, recv);
  return recv.permute({1, 2, 3, 0, 4, 5}).reshape({g, b, h / n, n * ts, hd});
}

at::Tensor heads_to_segments(dist::Communicator& sp, const at::Tensor& x) {
  const int64_t n = sp.size(), g = x.size(0), b = x.size(1), hs = x.size(2), t = x.size(3), hd = x.size(4);
  LOOM_CHECK(x.dim() == 5 && t % n == 0, "[sp] ulysses: a sequence of {} does not split over sp = {}", t, n);
  // Block r (sent to rank r) is segment r of this rank's heads.
  const at::Tensor send = x.reshape({g, b, hs, n, t / n, hd}).permute({3, 0, 1, 2, 4, 5}).contiguous();
  at::Tensor recv = at::empty_like(send);  // block j: head group j of this segment
  sp.all_to_all(send, recv);
  return recv.permute({1, 2, 0, 3, 4, 5}).reshape({g, b, n * hs, t / n, hd});
}

}  // namespace loom::parallel

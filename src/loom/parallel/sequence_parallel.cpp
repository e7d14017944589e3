#include "loom/parallel/sequence_parallel.h"

#include "loom/core/error.h"

namespace loom::parallel {

std::vector<int64_t> sequence_chunks(const SpOptions& sp) {
  if (!sp.active()) return {0};
  const int64_t r = sp.sp->rank(), n = sp.sp->size();
  if (sp.mode == SpMode::Ring) return {r, 2 * n - 1 - r};
  return {r};
}

at::Tensor chunk_positions(const std::vector<int64_t>& chunks, int64_t tokens) {
  const auto n = static_cast<int64_t>(chunks.size());
  LOOM_CHECK(n > 0 && tokens % n == 0, "[sp] {} tokens are not {} equal chunks", tokens, n);
  const int64_t length = tokens / n;
  std::vector<at::Tensor> parts;
  for (int64_t c : chunks) parts.push_back(at::arange(c * length, (c + 1) * length, at::kLong));
  return n == 1 ? parts[0] : at::cat(parts);
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

namespace {

// x [B, H, Ts, hd] as sp groups of its heads, [sp, B, H/sp, Ts, hd] (group r first); a view.
at::Tensor head_groups(const at::Tensor& x, int64_t n) {
  LOOM_CHECK(x.dim() == 4 && x.size(1) % n == 0, "[sp] ulysses: {} heads do not split over sp = {}",
             x.dim() == 4 ? x.size(1) : 0, n);
  return x.reshape({x.size(0), n, x.size(1) / n, x.size(2), x.size(3)}).transpose(0, 1);
}

// x [B, Hs, T, hd] as sp segments of its sequence, [sp, B, Hs, T/sp, hd] (segment r first); a view.
at::Tensor sequence_segments(const at::Tensor& x, int64_t n) {
  LOOM_CHECK(x.dim() == 4 && x.size(2) % n == 0, "[sp] ulysses: a sequence of {} does not split over sp = {}",
             x.dim() == 4 ? x.size(2) : 0, n);
  return x.reshape({x.size(0), x.size(1), n, x.size(2) / n, x.size(3)}).permute({2, 0, 1, 3, 4});
}

// Sends block r of every part ([sp, B, Hi, ...]) to rank r in one all-to-all, the parts packed
// along their head dim; returns each part's received blocks (block j from rank j).
std::vector<at::Tensor> all_to_all_packed(dist::Communicator& sp, const std::vector<at::Tensor>& parts) {
  std::vector<int64_t> widths;
  for (const at::Tensor& p : parts) widths.push_back(p.size(2));
  const at::Tensor send = at::cat(parts, 2);
  at::Tensor recv = at::empty_like(send);
  sp.all_to_all(send, recv);
  return recv.split_with_sizes(widths, 2);
}

}  // namespace

std::vector<at::Tensor> segments_to_heads(dist::Communicator& sp, const std::vector<at::Tensor>& xs) {
  const int64_t n = sp.size();
  std::vector<at::Tensor> parts;
  for (const at::Tensor& x : xs) parts.push_back(head_groups(x, n));
  std::vector<at::Tensor> out;
  for (const at::Tensor& r : all_to_all_packed(sp, parts))  // block j: segment j of this rank's heads
    out.push_back(r.permute({1, 2, 0, 3, 4}).reshape({r.size(1), r.size(2), n * r.size(3), r.size(4)}));
  return out;
}

std::vector<at::Tensor> heads_to_segments(dist::Communicator& sp, const std::vector<at::Tensor>& xs) {
  const int64_t n = sp.size();
  std::vector<at::Tensor> parts;
  for (const at::Tensor& x : xs) parts.push_back(sequence_segments(x, n));
  std::vector<at::Tensor> out;
  for (const at::Tensor& r : all_to_all_packed(sp, parts))  // block j: head group j of this segment
    out.push_back(r.transpose(0, 1).reshape({r.size(1), n * r.size(2), r.size(3), r.size(4)}));
  return out;
}

}  // namespace loom::parallel

#include "loom/parallel/sequence_parallel.h"

#include "loom/core/error.h"

namespace loom::parallel {

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

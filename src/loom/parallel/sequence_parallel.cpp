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

}  // namespace loom::parallel

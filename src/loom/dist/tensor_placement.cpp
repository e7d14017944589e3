#include "loom/dist/tensor_placement.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/core/error.h"

namespace loom::dist {
namespace {

// `t` with `dim` padded with zeros to `length`.
at::Tensor padded(const at::Tensor& t, int dim, int64_t length) {
  const int64_t have = t.size(dim);
  if (have == length) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[static_cast<size_t>(dim)] = length;
  at::Tensor out = at::zeros(shape, t.options());
  out.narrow(dim, 0, have).copy_(t);
  return out;
}

void check_dim(const at::Tensor& t, Placement p, const char* op) {
  LOOM_CHECK(p.kind != PlacementKind::Shard || (p.dim >= 0 && p.dim < t.dim()),
             "[placement] {} of a {}-d tensor along dimension {}", op, t.dim(), p.dim);
}

}  // namespace

at::Tensor piece(const at::Tensor& full, Placement p, int rank, int n) {
  check_dim(full, p, "piece");
  switch (p.kind) {
    case PlacementKind::Replicate: return full.clone();
    case PlacementKind::Partial: return rank == 0 ? full.clone() : at::zeros_like(full);
    case PlacementKind::Shard: break;
  }
  const int64_t size = full.size(p.dim), length = piece_length(size, n);
  const int64_t real = real_length(size, n, rank);
  return padded(full.narrow(p.dim, std::min(length * rank, size), real), p.dim, length).contiguous();
}

at::Tensor gather(const at::Tensor& piece, Placement p, at::IntArrayRef full_shape, Communicator& group) {
  check_dim(piece, p, "gather");
  switch (p.kind) {
    case PlacementKind::Replicate: return piece;
    case PlacementKind::Partial: {
      at::Tensor sum = piece.contiguous().clone();
      group.all_reduce(sum, ReduceOp::Sum);
      return sum;
    }
    case PlacementKind::Shard: break;
  }
  const int n = group.size();
  const at::Tensor mine = piece.contiguous();
  std::vector<int64_t> stacked = mine.sizes().vec();
  stacked.insert(stacked.begin(), n);
  at::Tensor all = at::empty(stacked, mine.options());
  group.all_gather(mine, all);
  // [n, ..., L, ...] -> [..., n L, ...]: the pieces side by side along the dimension, padding cut.
  const at::Tensor whole = at::cat(all.unbind(0), p.dim);
  return whole.narrow(p.dim, 0, full_shape[static_cast<size_t>(p.dim)]).contiguous();
}

at::Tensor reduce_scatter(const at::Tensor& summand, Placement p, Communicator& group) {
  check_dim(summand, p, "reduce_scatter");
  switch (p.kind) {
    case PlacementKind::Partial: return summand;
    case PlacementKind::Replicate: {
      at::Tensor sum = summand.contiguous().clone();
      group.all_reduce(sum, ReduceOp::Sum);
      return sum;
    }
    case PlacementKind::Shard: break;
  }
  const int n = group.size();
  const int64_t length = piece_length(summand.size(p.dim), n);
  // Every rank's piece (padded) one after another, as reduce-scatter takes its blocks.
  const at::Tensor blocks = at::stack(padded(summand, p.dim, length * n).split(length, p.dim)).contiguous();
  at::Tensor out = at::empty(blocks[0].sizes(), summand.options());
  group.reduce_scatter(blocks, out, ReduceOp::Sum);
  return out;
}

}  // namespace loom::dist

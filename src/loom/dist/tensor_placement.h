#pragma once
// NOTE [Placements]: how one tensor of the model lies over one axis of the mesh (a group of n
// ranks), the three ways the peers name too:
//   - Replicate: every rank holds the whole tensor;
//   - Shard(dim): rank r holds rows [r L, (r + 1) L) along `dim`, L = ceil(size / n); the pieces
//     past the end are zero padding, so every piece has the same shape and one all-gather or one
//     reduce-scatter moves them (a size that n does not divide, a vocabulary of 97, still works);
//   - Partial: every rank holds a summand; the tensor is their sum (a gradient before it is
//     reduced).
// The three operations between them are the collectives a parallel layout is made of: `piece`
// cuts a full tensor, `gather` makes it whole (Shard -> all-gather, Partial -> all-reduce) and
// `reduce_scatter` turns summands into pieces of the sum (Partial -> Shard). ZeRO-2 and -3 keep a
// layer's parameters as one flat vector placed Shard(0) over the shard group (replicas/
// sharded_params.h), its gradients Partial until they are reduce-scattered into that shard, and the
// shards Replicate across the groups of a hybrid layout.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "loom/dist/communicator.h"

namespace loom::dist {

enum class PlacementKind : uint8_t { Replicate, Shard, Partial };

struct Placement {
  PlacementKind kind = PlacementKind::Replicate;
  int dim = 0;  // Shard's dimension

  static Placement replicate() { return {}; }
  static Placement shard(int dim) { return {PlacementKind::Shard, dim}; }
  static Placement partial() { return {PlacementKind::Partial, 0}; }
  std::string text() const;  // "replicate", "shard(0)", "partial"
  bool operator==(const Placement&) const = default;
};

// The rows of each piece of a dimension of `size` sharded over `n` ranks: ceil(size / n).
inline int64_t piece_length(int64_t size, int n) { return (size + n - 1) / n; }
// How many of them are real (not padding) on `rank`: between 0 and piece_length.
int64_t real_length(int64_t size, int n, int rank);

// Rank `rank`'s piece of `full` (a fresh contiguous tensor): Replicate, a copy; Shard, its rows
// padded with zeros to piece_length; Partial, `full` on rank 0 and zeros elsewhere (the pieces
// sum to `full`).
at::Tensor piece(const at::Tensor& full, Placement p, int rank, int n);
// Collective over `group`: the whole tensor of `full_shape` from every rank's piece.
at::Tensor gather(const at::Tensor& piece, Placement p, at::IntArrayRef full_shape, Communicator& group);
// Collective over `group`: every rank holds a summand of the whole tensor; returns this rank's
// piece of their sum under `p` (Replicate: the whole sum; Partial: the summand as it is).
at::Tensor reduce_scatter(const at::Tensor& summand, Placement p, Communicator& group);

}  // namespace loom::dist

#pragma once
// NOTE [Placements] (core/mesh_placement.h): the collectives between a tensor's placements over
// one axis of the mesh. ZeRO-2 and -3 keep a layer's parameters as one flat vector placed Shard(0)
// over the shard group (replicas/sharded_params.h), its gradients Partial until they are
// reduce-scattered into that shard, and the shards Replicate across the groups of a hybrid layout.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "loom/core/mesh_placement.h"
#include "loom/dist/communicator.h"

namespace loom::dist {

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

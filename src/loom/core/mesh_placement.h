#pragma once
// NOTE [Placements]: how one tensor of the model lies over one axis of the mesh (a group of n
// ranks), the three ways the peers name too:
//   - Replicate: every rank holds the whole tensor;
//   - Shard(dim): rank r holds rows [r L, (r + 1) L) along `dim`, L = ceil(size / n); the pieces
//     past the end are zero padding, so every piece has the same shape and one all-gather or one
//     reduce-scatter moves them (a size that n does not divide, a vocabulary of 97, still works);
//   - Partial: every rank holds a summand; the tensor is their sum (a gradient before it is
//     reduced).
// The values live here, below every folder that names them (a parameter's placements, nn/param.h);
// the collectives between them are in dist/tensor_placement.h.
//
// NOTE [Parameter placements]: a parameter says how it lies over each named axis of the mesh
// (NOTE [Mesh axes]) that splits it or its gradient: its value's placement and its gradient's
// after the backward, before any reduction. An axis it does not name holds it whole: its value is
// replicated, and its gradient is a summand on the data axes (dp, sp and ep: each rank saw other
// tokens) and whole on the model axes (tp: every rank saw the same tokens). So
//   - a column-parallel weight is {tp: value Shard(0), grad Shard(0)};
//   - a norm's gain under parallel.tp_sequence is {tp: value Replicate, grad Partial}: each tp rank
//     saw a slice of the sequence, and the gradients are summed over tp once per step;
//   - an expert's stacked weights under expert parallelism are {ep: value Shard(0), grad Shard(0)}:
//     a rank holds E / ep experts and receives all of their tokens' gradients from its group;
//   - every other dense parameter names no axis.
// Readers ask by axis (Param::value_on, Param::grad_on): the part a rank holds (Param::part), the
// gradient norm's sum over tp (optim/clip.h), the tp reduction of summands (parallel/tp_region.h)
// and the checkpoint's box (replicas/optimizer_state.cpp) all come from them. ZeRO's ownership of
// a layer's flat vector (replicas/sharded_params.h) and a sparse table's row owners (NOTE [Sparse
// exchange]) are placements of the replicas' own buffers, over the data axes, not of a parameter.
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

enum class PlacementKind : uint8_t { Replicate, Shard, Partial };

struct Placement {
  PlacementKind kind = PlacementKind::Replicate;
  int dim = 0;  // Shard's dimension

  static Placement replicate() { return {}; }
  static Placement shard(int dim) { return {PlacementKind::Shard, dim}; }
  static Placement partial() { return {PlacementKind::Partial, 0}; }
  bool is_shard() const { return kind == PlacementKind::Shard; }
  bool is_partial() const { return kind == PlacementKind::Partial; }
  std::string text() const;  // "replicate", "shard(0)", "partial"
  bool operator==(const Placement&) const = default;
};

// The rows of each piece of a dimension of `size` sharded over `n` ranks: ceil(size / n).
inline int64_t piece_length(int64_t size, int n) { return (size + n - 1) / n; }
// How many of them are real (not padding) on `rank`: between 0 and piece_length.
int64_t real_length(int64_t size, int n, int rank);

// The axes whose ranks see other tokens (NOTE [Mesh axes]): a gradient there is a summand. ep
// (NOTE [Expert parallelism]) is a division of dp: groups of consecutive dp ranks.
inline bool data_axis(std::string_view axis) { return axis == "dp" || axis == "sp" || axis == "ep"; }

// NOTE [Parameter placements]: one named axis' entry. `rank` and `size` (this rank's coordinate
// on the axis, the axis' size) place a Shard's piece; they are unused otherwise.
struct AxisPlacement {
  std::string axis;  // "tp", ... (NOTE [Mesh axes])
  Placement value;
  Placement grad;
  int rank = 0, size = 1;

  // Value and gradient both Shard(dim): rank `rank` of `size` holds its piece of each.
  static AxisPlacement sharded(std::string axis, int dim, int rank, int size) {
    return {std::move(axis), Placement::shard(dim), Placement::shard(dim), rank, size};
  }
  // Value replicated, gradient a summand over the axis (each rank saw part of the tokens).
  static AxisPlacement summed(std::string axis) {
    return {std::move(axis), Placement::replicate(), Placement::partial()};
  }
  bool operator==(const AxisPlacement&) const = default;
};

}  // namespace loom

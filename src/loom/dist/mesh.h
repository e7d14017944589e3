#pragma once
// The parallel layout: world = dp x pp x sp x tp ranks, axes in that fixed order from outermost
// to innermost (tp innermost, so a tensor-parallel group holds neighbouring ranks):
//   rank = ((dp_rank * pp + pp_rank) * sp + sp_rank) * tp + tp_rank.
// One communicator per axis, plus the combined dp x sp group over which weight gradients are
// summed once ("double gradient averaging"). Every rank of the world constructs the Mesh
// (the constructor splits the world communicator: a collective).
#include <memory>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"

namespace loom::dist {

struct MeshShape {
  int dp = 1, pp = 1, sp = 1, tp = 1;
  int ranks() const { return dp * pp * sp * tp; }
  bool operator==(const MeshShape&) const = default;
};

MeshShape mesh_shape(const ParallelConfig& parallel);

// A rank's coordinates on the four axes: the one place the rank order above is computed.
struct MeshCoords {
  int dp = 0, pp = 0, sp = 0, tp = 0;
};
MeshCoords mesh_coords(const MeshShape& shape, int rank);

// Throws InputError naming every degree when the shape does not fit `world_size` ranks.
void check_mesh_shape(const MeshShape& shape, int world_size);

class Mesh {
 public:
  Mesh(Communicator& world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_.rank(); }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int sp_rank() const { return sp_rank_; }
  int tp_rank() const { return tp_rank_; }

  Communicator& world() { return world_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  Communicator& sp() { return *sp_; }
  Communicator& tp() { return *tp_; }
  Communicator& dp_sp() { return *dp_sp_; }

 private:
  Communicator& world_;
  MeshShape shape_;
  int dp_rank_, pp_rank_, sp_rank_, tp_rank_;
  std::unique_ptr<Communicator> dp_, pp_, sp_, tp_, dp_sp_;
};

}  // namespace loom::dist

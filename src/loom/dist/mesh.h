#pragma once
// NOTE [Mesh axes]: the parallel layout is a list of named axes, outermost first: dp x pp x sp x tp
// (tp innermost, so a tensor-parallel group holds neighbouring ranks). A rank's coordinates are
// its digits in that mixed radix:
//   rank = ((dp_rank * pp + pp_rank) * sp + sp_rank) * tp + tp_rank.
// A group over some axes holds the ranks that agree on every other axis, ordered by their
// coordinates on the group's own axes (flattened outermost first): the group over {dp} is a
// data-parallel group, the one over {dp, sp} the group over which weight gradients are summed once
// ("double gradient averaging"). Groups are named by their axes, never hand-written: an axis more
// is an entry in axes() and the groups that use it. Two kinds of groups divide one axis instead
// and are split from its group: ZeRO's shard groups (replicas/replica_optimizer.cpp) and the
// expert groups of NOTE [Expert parallelism] (ep: consecutive dp ranks; edp: the dp x sp ranks at
// the same place in their groups). A parameter placed over "ep" names that division. Every rank of the
// world constructs the Mesh (the constructor splits the world communicator: a collective).
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"

namespace loom::dist {

struct MeshAxis {
  std::string name;
  int size = 1;
  bool operator==(const MeshAxis&) const = default;
};

// The degrees of the four axes loom runs on today, by name (a value to write `{.dp = 2, .tp = 4}`).
struct MeshDegrees {
  int dp = 1, pp = 1, sp = 1, tp = 1;
};

// NOTE [Mesh axes]: the shape, a list of named axes, outermost first. An axis it does not hold
// has size 1 (every rank's coordinate on it is 0).
class MeshShape {
 public:
  MeshShape() : MeshShape(MeshDegrees{}) {}
  MeshShape(MeshDegrees d);  // dp x pp x sp x tp  NOLINT(google-explicit-constructor): a shape is its degrees
  // Any axes: names distinct and non-empty, sizes >= 1; throws loom::Error otherwise.
  explicit MeshShape(std::vector<MeshAxis> axes);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  // The axis' size; 1 for a name it does not hold.
  int size(std::string_view axis) const;
  int dp() const { return size("dp"); }
  int pp() const { return size("pp"); }
  int sp() const { return size("sp"); }
  int tp() const { return size("tp"); }
  int ranks() const;
  // How many ranks apart neighbours along `axis` are: the product of the sizes inside it.
  int stride(std::string_view axis) const;
  // `rank`'s coordinate on `axis` (0 for a name it does not hold): its digit in the mixed radix.
  int coordinate(int rank, std::string_view axis) const;
  bool operator==(const MeshShape&) const = default;

 private:
  std::vector<MeshAxis> axes_;
};

MeshShape mesh_shape(const ParallelConfig& parallel);

// A rank's coordinates on the four axes, by name.
struct MeshCoords {
  int dp = 0, pp = 0, sp = 0, tp = 0;
};
MeshCoords mesh_coords(const MeshShape& shape, int rank);

// Throws InputError naming every degree when the shape does not fit `world_size` ranks.
void check_mesh_shape(const MeshShape& shape, int world_size);

// NOTE [Mesh axes]: which group over `axes` holds `rank` (color: its coordinates on the other
// axes, flattened) and its rank in that group (key: its coordinates on `axes`, flattened). Throws
// loom::Error for a name that is not an axis.
struct GroupPlace {
  int color = 0, key = 0;
  bool operator==(const GroupPlace&) const = default;
};
GroupPlace group_place(const MeshShape& shape, int rank, std::initializer_list<std::string_view> axes);

class Mesh {
 public:
  // `ep`: the expert groups' size inside dp (NOTE [Expert parallelism]); it divides dp.
  Mesh(Communicator& world, MeshShape shape, int ep = 1);

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
  // NOTE [Expert parallelism]: groups of ep consecutive dp ranks ("ep"), and the dp x sp ranks at
  // the same place in their groups ("edp": the replicas of one set of experts, whose gradients
  // are summands over dp and sp alike).
  Communicator& ep() { return *ep_; }
  Communicator& expert_replicas() { return *edp_; }

  // A communicator over the group of `axes` this rank is in (group_place), named `name` in the
  // communication records. Collective over the world.
  std::unique_ptr<Communicator> split(std::initializer_list<std::string_view> axes, const std::string& name);

 private:
  Communicator& world_;
  MeshShape shape_;
  int dp_rank_, pp_rank_, sp_rank_, tp_rank_;
  std::unique_ptr<Communicator> dp_, pp_, sp_, tp_, dp_sp_, ep_, edp_;
};

}  // namespace loom::dist

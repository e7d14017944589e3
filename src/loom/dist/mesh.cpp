#include "loom/dist/mesh.h"

#include "loom/core/error.h"

namespace loom::dist {

MeshShape mesh_shape(const ParallelConfig& p) {
  return {static_cast<int>(p.dp), static_cast<int>(p.pp), static_cast<int>(p.sp), static_cast<int>(p.tp)};
}

void check_mesh_shape(const MeshShape& s, int world_size) {
  LOOM_CHECK_INPUT(s.dp >= 1 && s.pp >= 1 && s.sp >= 1 && s.tp >= 1 && s.ranks() == world_size,
                   "[mesh] dp ({}) x pp ({}) x sp ({}) x tp ({}) = {} ranks, but the job has {}; hint: launch "
                   "with `mpirun -np {}` or change the [parallel] degrees",
                   s.dp, s.pp, s.sp, s.tp, s.ranks(), world_size, s.ranks());
}

MeshCoords mesh_coords(const MeshShape& shape, int rank) {
  MeshCoords c;
  c.tp = rank % shape.tp, rank /= shape.tp;
  c.sp = rank % shape.sp, rank /= shape.sp;
  c.pp = rank % shape.pp, rank /= shape.pp;
  c.dp = rank;
  return c;
}

Mesh::Mesh(Communicator& world, MeshShape shape) : world_(world), shape_(shape) {
  check_mesh_shape(shape, world.size());
  const MeshCoords c = mesh_coords(shape, world.rank());
  dp_rank_ = c.dp, pp_rank_ = c.pp, sp_rank_ = c.sp, tp_rank_ = c.tp;
  const int dp = dp_rank_, pp = pp_rank_, sp = sp_rank_, tp = tp_rank_;
  const MeshShape& s = shape;
  // color: the coordinates on the other axes; key: the coordinate along the axis.
  dp_ = world.split((pp * s.sp + sp) * s.tp + tp, dp, "dp");
  pp_ = world.split((dp * s.sp + sp) * s.tp + tp, pp, "pp");
  sp_ = world.split((dp * s.pp + pp) * s.tp + tp, sp, "sp");
  tp_ = world.split((dp * s.pp + pp) * s.sp + sp, tp, "tp");
  dp_sp_ = world.split(pp * s.tp + tp, dp * s.sp + sp, "dp_sp");
}

}  // namespace loom::dist

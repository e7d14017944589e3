#include "loom/dist/mesh.h"

#include <algorithm>

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

namespace {

// A rank's coordinate on each axis of shape.axes(), in that order.
std::array<int, 4> coordinates(const MeshShape& shape, int rank) {
  const auto axes = shape.axes();
  std::array<int, 4> c{};
  for (size_t i = axes.size(); i-- > 0;) c[i] = rank % axes[i].size, rank /= axes[i].size;
  return c;
}

}  // namespace

MeshCoords mesh_coords(const MeshShape& shape, int rank) {
  const std::array<int, 4> c = coordinates(shape, rank);
  return {.dp = c[0], .pp = c[1], .sp = c[2], .tp = c[3]};
}

GroupPlace group_place(const MeshShape& shape, int rank, std::initializer_list<std::string_view> axes) {
  const auto all = shape.axes();
  for (std::string_view name : axes)
    LOOM_CHECK(std::any_of(all.begin(), all.end(), [&](const MeshAxis& a) { return a.name == name; }),
               "[mesh] no axis named \"{}\"", name);
  const std::array<int, 4> c = coordinates(shape, rank);
  GroupPlace place;
  for (size_t i = 0; i < all.size(); ++i) {  // outermost first: each digit in its own radix
    const bool in_group = std::find(axes.begin(), axes.end(), all[i].name) != axes.end();
    int& digits = in_group ? place.key : place.color;
    digits = digits * all[i].size + c[i];
  }
  return place;
}

Mesh::Mesh(Communicator& world, MeshShape shape) : world_(world), shape_(shape) {
  check_mesh_shape(shape, world.size());
  const MeshCoords c = mesh_coords(shape, world.rank());
  dp_rank_ = c.dp, pp_rank_ = c.pp, sp_rank_ = c.sp, tp_rank_ = c.tp;
  dp_ = split({"dp"}, "dp");
  pp_ = split({"pp"}, "pp");
  sp_ = split({"sp"}, "sp");
  tp_ = split({"tp"}, "tp");
  dp_sp_ = split({"dp", "sp"}, "dp_sp");
}

std::unique_ptr<Communicator> Mesh::split(std::initializer_list<std::string_view> axes, const std::string& name) {
  const GroupPlace place = group_place(shape_, world_.rank(), axes);
  return world_.split(place.color, place.key, name);
}

}  // namespace loom::dist

#include "loom/dist/mesh.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::dist {

MeshShape::MeshShape(MeshDegrees d) : MeshShape({{"dp", d.dp}, {"pp", d.pp}, {"sp", d.sp}, {"tp", d.tp}}) {}

MeshShape::MeshShape(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {
  for (size_t i = 0; i < axes_.size(); ++i) {
    LOOM_CHECK(!axes_[i].name.empty() && axes_[i].size >= 1, "[mesh] axis {} is \"{}\" of size {}", i, axes_[i].name,
               axes_[i].size);
    for (size_t j = 0; j < i; ++j) LOOM_CHECK(axes_[j].name != axes_[i].name, "[mesh] two axes named \"{}\"", axes_[i].name);
  }
}

int MeshShape::size(std::string_view axis) const {
  for (const MeshAxis& a : axes_)
    if (a.name == axis) return a.size;
  return 1;
}

int MeshShape::ranks() const {
  int n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

int MeshShape::stride(std::string_view axis) const {
  int inside = 1;
  for (size_t i = axes_.size(); i-- > 0;) {
    if (axes_[i].name == axis) return inside;
    inside *= axes_[i].size;
  }
  return inside;  // an axis it does not hold: size 1, any stride would do
}

int MeshShape::coordinate(int rank, std::string_view axis) const { return rank / stride(axis) % size(axis); }

MeshShape mesh_shape(const ParallelConfig& p) {
  return MeshDegrees{static_cast<int>(p.dp), static_cast<int>(p.pp), static_cast<int>(p.sp), static_cast<int>(p.tp)};
}

void check_mesh_shape(const MeshShape& s, int world_size) {
  LOOM_CHECK_INPUT(s.ranks() == world_size,
                   "[mesh] dp ({}) x pp ({}) x sp ({}) x tp ({}) = {} ranks, but the job has {}; hint: launch "
                   "with `mpirun -np {}` or change the [parallel] degrees",
                   s.dp(), s.pp(), s.sp(), s.tp(), s.ranks(), world_size, s.ranks());
}

MeshCoords mesh_coords(const MeshShape& shape, int rank) {
  return {.dp = shape.coordinate(rank, "dp"), .pp = shape.coordinate(rank, "pp"), .sp = shape.coordinate(rank, "sp"),
          .tp = shape.coordinate(rank, "tp")};
}

GroupPlace group_place(const MeshShape& shape, int rank, std::initializer_list<std::string_view> axes) {
  const std::vector<MeshAxis>& all = shape.axes();
  for (std::string_view name : axes)
    LOOM_CHECK(std::any_of(all.begin(), all.end(), [&](const MeshAxis& a) { return a.name == name; }),
               "[mesh] no axis named \"{}\"", name);
  GroupPlace place;
  for (const MeshAxis& a : all) {  // outermost first: each digit in its own radix
    const bool in_group = std::find(axes.begin(), axes.end(), a.name) != axes.end();
    int& digits = in_group ? place.key : place.color;
    digits = digits * a.size + shape.coordinate(rank, a.name);
  }
  return place;
}

Mesh::Mesh(Communicator& world, MeshShape shape, int ep) : world_(world), shape_(shape) {
  check_mesh_shape(shape, world.size());
  const MeshCoords c = mesh_coords(shape, world.rank());
  dp_rank_ = c.dp, pp_rank_ = c.pp, sp_rank_ = c.sp, tp_rank_ = c.tp;
  dp_ = split({"dp"}, "dp");
  pp_ = split({"pp"}, "pp");
  sp_ = split({"sp"}, "sp");
  tp_ = split({"tp"}, "tp");
  dp_sp_ = split({"dp", "sp"}, "dp_sp");
  LOOM_CHECK(ep >= 1 && shape_.dp() % ep == 0, "[mesh] expert groups of {} in dp = {}", ep, shape_.dp());
  ep_ = dp_->split(dp_rank_ / ep, dp_rank_ % ep, "ep");
  edp_ = dp_sp_->split(dp_rank_ % ep, (dp_rank_ / ep) * shape_.size("sp") + sp_rank_, "edp");
}

std::unique_ptr<Communicator> Mesh::split(std::initializer_list<std::string_view> axes, const std::string& name) {
  const GroupPlace place = group_place(shape_, world_.rank(), axes);
  return world_.split(place.color, place.key, name);
}

}  // namespace loom::dist

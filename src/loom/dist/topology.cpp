#include "loom/dist/topology.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace loom::dist {
namespace {

// Whether the ranks of `group` run on more than one host (a collective over the group).
bool spans_hosts(Communicator& group) {
  if (group.size() == 1) return false;
  at::Tensor mine = at::full({1}, group.host(), at::kLong), all = at::empty({group.size()}, at::kLong);
  group.all_gather(mine, all);
  return (all != all[0]).any().item<bool>();
}

}  // namespace

std::string host_span_warning(Mesh& mesh) {
  at::Tensor spans = at::tensor({static_cast<int64_t>(spans_hosts(mesh.tp())), static_cast<int64_t>(spans_hosts(mesh.sp()))},
                                at::kLong);
  mesh.world().all_reduce(spans, ReduceOp::Max);
  std::vector<std::string> axes;
  if (spans[0].item<int64_t>() != 0) axes.push_back(fmt::format("tp ({})", mesh.shape().tp()));
  if (spans[1].item<int64_t>() != 0) axes.push_back(fmt::format("sp ({})", mesh.shape().sp()));
  if (axes.empty()) return "";
  return fmt::format(
      "the {} groups span hosts (ranks on rank 0's host: {}): every layer's exchange in them "
      "crosses the network; hint: give each host a multiple of tp x sp = {} ranks, numbered consecutively "
      "(mpirun --map-by slot)",
      fmt::join(axes, " and "), mesh.world().local_ranks(), mesh.shape().tp() * mesh.shape().sp());
}

}  // namespace loom::dist

#include "loom/dist/topology.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

namespace loom::dist {
namespace {

// Whether the ranks of `group` run on more than one host (a collective over the group).
bool spans_hosts(Communicator& group) {
  const std::vector<int> host_of = hosts_of_ranks(group);
  return std::any_of(host_of.begin(), host_of.end(), [&](int h) { return h != host_of[0]; });
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

std::vector<int> hosts_of_ranks(Communicator& world) {
  if (world.size() == 1) return {world.host()};
  at::Tensor mine = at::full({1}, world.host(), at::kLong), all = at::empty({world.size()}, at::kLong);
  world.all_gather(mine, all);
  std::vector<int> out;
  for (int64_t r = 0; r < world.size(); ++r) out.push_back(static_cast<int>(all[r].item<int64_t>()));
  return out;
}

int ranks_per_host(const std::vector<int>& host_of) {
  const auto n = static_cast<int>(host_of.size());
  int per = 0;
  while (per < n && host_of[per] == host_of[0]) ++per;
  if (per == 0 || n % per != 0) return 0;
  for (int r = 0; r < n; ++r)  // blocks of `per`, each on one host that is its first rank
    if (host_of[r] != r - r % per) return 0;
  return per;
}

}  // namespace loom::dist

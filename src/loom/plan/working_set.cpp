#include "loom/plan/working_set.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/nn/param.h"

namespace loom::plan {
namespace {

constexpr size_t kInFlight = 1;  // as replicas/sharded_params.cpp: reductions outstanding at once

// A layer's gradient pieces, padded to the group: its unit (every dense parameter it brings, but
// under ZeRO-3 the sliceable ones) and, under ZeRO-3, each sliceable parameter's largest slice.
struct Pieces {
  double unit = 0, slice = 0;
  int64_t slices = 0;
};

Pieces pieces(const RunPlan& plan, size_t at) {
  Pieces p;
  if (at >= plan.chain.size()) return p;
  const auto n = static_cast<double>(shard_ways(plan.config.parallel));
  const bool slicing = plan.config.parallel.zero == 3;
  double unit = 0;
  for (const ParamInfo& info : plan.chain[at].params) {
    if (info.table || info.expert) continue;
    if (!slicing || !info.sliceable) {
      unit += static_cast<double>(info.numel);
      continue;
    }
    const nn::RowSlices cut(info.numel / info.row_width);
    p.slice = std::max(p.slice, std::ceil(static_cast<double>(cut.each * info.row_width) / n) * n);
    p.slices += cut.count();
  }
  p.unit = unit > 0 ? std::ceil(unit / n) * n : 0.0;
  return p;
}

}  // namespace

int64_t shard_ways(const ParallelConfig& p) { return p.zero < 2 ? 1 : p.shard_ranks(); }

double working_bytes(const RunPlan& plan, size_t i, double master, double copy) {
  const Config& c = plan.config;
  if (c.parallel.zero < 2 || plan.chain.empty()) return 0;
  // The pieces backward reduces, from the chain's last layer to its first: each layer's slices
  // (inside its weight gradient), then its unit. Layer i's begin at `at`.
  std::vector<double> order;
  size_t at = 0;
  for (size_t l = plan.chain.size(); l-- > 0;) {
    if (l == i) at = order.size();
    const Pieces p = pieces(plan, l);
    order.insert(order.end(), static_cast<size_t>(p.slices), p.slice);
    if (p.unit > 0) order.push_back(p.unit);
  }
  if (order.empty()) return 0;
  // What is still being reduced when piece q starts: the kInFlight before it (the first layer's
  // last ones, of the micro-batch before, for the chain's last layer).
  auto in_flight = [&](size_t q) {
    double bytes = 0;
    for (size_t back = 1; back <= kInFlight; ++back) bytes += order[(q + order.size() * kInFlight - back) % order.size()];
    return bytes;
  };
  const Pieces own = pieces(plan, i);
  const bool gathers = c.parallel.zero == 3;
  const double neighbour = gathers ? std::max(i > 0 ? pieces(plan, i - 1).unit : 0.0, pieces(plan, i + 1).unit) : 0.0;
  const double values = gathers ? own.unit + 2 * own.slice : 0.0;  // its unit and two slices whole
  const double gathered = master + copy;
  // Forward: its values and the next layer's gathered ahead, the backward's last reduction
  // perhaps still in flight. Input gradient: its values, the piece before it in flight.
  double bytes = std::max((values + neighbour) * gathered + order.back() * master,
                          values * gathered + in_flight(at) * master);
  // Weight gradient (its values freed), writing its pieces one by one: in a backward, the
  // next layer gathered ahead once the reductions before it completed (NOTE [Sharded
  // parameters]: prefetch), its own pieces before still in flight; in a W action (no gathers)
  // or a chunk's first layer, the reductions before it still in flight.
  const size_t count = static_cast<size_t>(own.slices) + (own.unit > 0 ? 1 : 0);
  for (size_t q = at; q < at + count; ++q) {
    const double written = order[q] + (q + 1 < at + count ? own.unit : 0.0);  // the unit's buffer exists throughout
    const double own_before = q > at ? order[q - 1] : 0.0;
    bytes = std::max({bytes, neighbour * gathered + (written + own_before) * master, (written + in_flight(q)) * master});
  }
  return bytes;
}

}  // namespace loom::plan

#include "loom/plan/working_set.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/nn/param.h"
#include "loom/schedule/schedule.h"

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

std::vector<double> working_bytes(const RunPlan& plan, double master, double copy) {
  const Config& c = plan.config;
  const size_t layers = plan.chain.size();
  if (c.parallel.zero < 2 || layers == 0) return {};
  // The pieces backward reduces, from the chain's last layer to its first: each layer's slices
  // (inside its weight gradient), then its unit. Layer l's begin at start[l].
  std::vector<Pieces> of(layers);
  std::vector<double> order;
  std::vector<size_t> start(layers);
  for (size_t l = layers; l-- > 0;) {
    of[l] = pieces(plan, l);
    start[l] = order.size();
    order.insert(order.end(), static_cast<size_t>(of[l].slices), of[l].slice);
    if (of[l].unit > 0) order.push_back(of[l].unit);
  }
  if (order.empty()) return std::vector<double>(layers, 0.0);
  // What is still being reduced when piece q starts: the kInFlight before it in backward's order.
  // With one chunk on one rank that is exact (the chain's last layer follows the first layer's
  // last piece, of the micro-batch before). With several chunks or stages, an action may start
  // after any chunk's last reduction, or beside a W action's: bounded by the largest piece.
  const bool one_chunk = plan.schedule.virtual_stages() == 1;
  const double largest = *std::max_element(order.begin(), order.end());
  auto in_flight = [&](size_t q) {
    double bytes = 0;
    for (size_t back = 1; back <= kInFlight; ++back) bytes += order[(q + order.size() * kInFlight - back) % order.size()];
    return one_chunk ? bytes : std::max(bytes, kInFlight * largest);
  };
  const bool gathers = c.parallel.zero == 3;
  const double gathered = master + copy;
  // A B action apart from its W (zb-h1, zb-v) gathers the next layer ahead as a forward does.
  bool split = false;
  for (const auto& list : plan.schedule.ranks)
    for (const schedule::Action& a : list) split = split || a.op == schedule::Op::B;
  // A narrower wire (parallel.grad_dtype) copies the piece being reduced beside its buffer for a moment.
  const double wire = c.parallel.grad_dtype == GradDType::BFloat16 && master > 2 ? 2.0 : 0.0;
  std::vector<double> out(layers);
  for (size_t i = 0; i < layers; ++i) {
    const Pieces& own = of[i];
    const double neighbour =
        gathers ? std::max(i > 0 ? of[i - 1].unit : 0.0, i + 1 < layers ? of[i + 1].unit : 0.0) : 0.0;
    const double values = gathers ? own.unit + 2 * own.slice : 0.0;  // its unit and two slices whole
    const size_t at = start[i];
    // Forward: its values and the next layer's gathered ahead, a reduction perhaps still in
    // flight. Input gradient: its values (and under a split B the next layer's), the piece before
    // in flight.
    double bytes = std::max((values + neighbour) * gathered + (one_chunk ? order.back() : largest) * master,
                            (values + (split ? neighbour : 0.0)) * gathered + in_flight(at) * master);
    // Weight gradient (its values freed), writing its pieces one by one: in a backward, the next
    // layer gathered ahead once the reductions before it completed (NOTE [Sharded parameters]:
    // prefetch), its own pieces before still in flight; in a W action (no gathers) or a chunk's
    // first layer, the reductions before it still in flight.
    const size_t count = static_cast<size_t>(own.slices) + (own.unit > 0 ? 1 : 0);
    for (size_t q = at; q < at + count; ++q) {
      const double written = order[q] + (q + 1 < at + count ? own.unit : 0.0);  // the unit's buffer exists throughout
      const double own_before = q > at ? order[q - 1] : 0.0;
      bytes = std::max({bytes, neighbour * gathered + (written + own_before) * master + order[q] * wire,
                        (written + in_flight(q)) * master + order[q] * wire});
    }
    out[i] = bytes;
  }
  return out;
}

}  // namespace loom::plan

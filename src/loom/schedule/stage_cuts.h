#pragma once
// Stage boundaries: a chain of layers cut into `parts` contiguous slices (pp x chunks virtual
// stages), as cuts: parts + 1 boundaries, slice i is [cuts[i], cuts[i+1]). Arithmetic on layer
// counts and costs only, beside the schedules that run the slices; the planner chooses cuts with
// it and the executor takes them (pipeline/partition.h).
#include <cstdint>
#include <functional>
#include <vector>

namespace loom::schedule {

// Refuses more slices than layers (InputError naming both).
void check_stage_count(int64_t layers, int64_t parts);

// The cut that minimises the largest slice's cost (dynamic programming over the chain); every
// slice holds at least one layer.
std::vector<int64_t> balanced_cuts(const std::vector<double>& layer_costs, int64_t parts);
// The same for a slice cost that depends on the slice's place: slice_cost(k, begin, end) of
// layers [begin, end) as slice k; +infinity marks a slice that cannot be. Returns {} when every
// cut has such a slice.
using SliceCost = std::function<double(int64_t slice, int64_t begin, int64_t end)>;
std::vector<int64_t> balanced_cuts(int64_t layers, int64_t parts, const SliceCost& slice_cost);

// parallel.pp_cuts: the first chain index of every slice but the first, strictly increasing in
// (0, layers). Throws InputError otherwise.
std::vector<int64_t> explicit_cuts(const std::vector<int64_t>& pp_cuts, int64_t layers, int64_t parts);

// Merak's stage-aware recomputation: the share of its layers pipeline stage k of S recomputes,
// r_k = 1 - (1 - r0)(S - 1)/(S - 1 - k), clamped to [0, 1]; the last stage recomputes none.
double stage_recompute_ratio(double first_stage_ratio, int64_t stage, int64_t stages);

}  // namespace loom::schedule

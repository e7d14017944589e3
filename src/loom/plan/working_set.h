#pragma once
// ZeRO-2/3's working set, as the plan counts it (NOTE [Fully sharded data parallelism], NOTE
// [Sliced reads]): what a layer holds beyond the sharded state while it runs.
#include <vector>

#include "loom/core/config.h"
#include "loom/plan/run_plan.h"

namespace loom::plan {

// The ranks one layer's vector is sharded over under ZeRO-2/3, or 1.
int64_t shard_ways(const ParallelConfig& p);

// What each chain layer holds while it runs, the larger of its two phases: passes that read
// values (ZeRO-3: its gathered values or two of its row slices, and a neighbour's gathered ahead)
// beside the kInFlight gradient pieces before it still being reduce-scattered; and its weight
// gradient (its values freed) writing its pieces one by one beside the same
// (replicas/sharded_params.cpp). `master`, `copy`: bytes of an element's master value and of its
// compute copy (0 when the products read the masters). Empty below ZeRO-2 (nothing is held).
std::vector<double> working_bytes(const RunPlan& plan, double master, double copy);

}  // namespace loom::plan

#pragma once
// What a pipeline rank's layers send per step, by group (StagePlan::comm_bytes in run_plan.h
// names the groups and what each carries).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/plan/run_plan.h"

namespace loom::plan {

// Bytes that pipeline rank `pp_rank`, holding chain layers `layers`, sends per step in each group.
std::map<std::string, double> comm_volume(const RunPlan& plan, int64_t pp_rank, const std::vector<int64_t>& layers);

}  // namespace loom::plan

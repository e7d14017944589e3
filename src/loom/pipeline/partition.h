#pragma once
// A rank's pipeline stages taken out of the chain, at cuts chosen by the plan
// (schedule/stage_cuts.h: parts + 1 boundaries, slice i is [cuts[i], cuts[i+1])).
#include <cstdint>
#include <vector>

#include "loom/nn/chain.h"
#include "loom/nn/memory_policy.h"
#include "loom/pipeline/executor.h"

namespace loom::pipeline {

// Moves the layers of this rank's virtual stages (chunk c is the schedule's virtual_stage(pp_rank,
// c): c x pp + pp_rank, or the V's) out of `model`, which keeps only them, in chunk order; `policy`
// holds every chain layer's memory policy.
std::vector<StageChunk> take_stages(nn::Chain& model, const std::vector<int64_t>& cuts,
                                    const schedule::Schedule& schedule, int64_t pp_rank,
                                    const std::vector<nn::MemoryPolicy>& policy);

}  // namespace loom::pipeline

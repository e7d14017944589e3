#pragma once
// NOTE [Expert measures]: what each mixture-of-experts block's router did in a step, over every
// rank: tokens per expert (kept assignments), dropped assignments, the balance loss's mean over
// the step's micro-batches. Each block counts the micro-batches it trained (MoeBlock::
// take_trained_load); each rank fills the rows of the blocks it holds and one sum over the world
// makes the step's totals (dp ranks trained other micro-batches, pp stages hold other blocks, sp
// and tp ranks counted their own tokens: NOTE [Experts over sequence parallelism], NOTE [Experts
// over tensor parallelism]; each of them counts the micro-batch's one balance loss and the
// micro-batch once, so the loss's mean is unchanged). The totals are the same in every layout, as the routing is; under
// model.moe_balance = "bias" they also move each block's choice bias (NOTE [Expert balance]).
#include <vector>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/train/run_report.h"

namespace loom::train {

// Collective over `world`; empty without experts.
std::vector<ExpertLoad> measure_experts(models::Model& model, const ModelConfig& config, dist::Communicator& world);
// The step's bias update of each block this rank holds, from the step's `loads` (measure_experts').
void balance_experts(models::Model& model, const ModelConfig& config, const std::vector<ExpertLoad>& loads);

}  // namespace loom::train

#pragma once
// What a step measured, agreed over the ranks (collective over the mesh): the peak memory
// (`peak_bytes`, this rank's on its device: NOTE [Device memory]; the largest over ranks) and, with pipeline stages, each stage's peak, the measured bubble (mean over
// ranks) and the simulator's bubble for the step's measured action times; the swap tier's peak
// (`host_peak`, this rank's) as the largest over ranks.
#include "loom/dist/mesh.h"
#include "loom/pipeline/executor.h"
#include "loom/schedule/schedule.h"
#include "loom/train/run_report.h"

namespace loom::train {

// A rank's bytes in a step, as StepRecord's fields of the same names describe them.
struct StepBytes {
  int64_t peak = 0, host_peak = 0, state = 0, model_state = 0, working = 0;
};

void measure_step(StepRecord& record, const pipeline::StepResult& result, dist::Mesh& mesh,
                  const schedule::Schedule& schedule, const StepBytes& bytes);

}  // namespace loom::train

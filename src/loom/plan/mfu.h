#pragma once
// NOTE [MFU]: model FLOPs utilisation, one definition for a plan's prediction (`loom simulate`,
// `loom plan`, parallel.auto's line) and a run's progress line and metrics:
//   MFU = model FLOPs of one step / (step seconds x peak FLOP/s per rank x ranks)
// Model FLOPs are the whole job's: every chain layer's forward, backward-input and backward-weight
// FLOPs (nn::Cost, one micro-batch on one rank: its tp shard and sp segment) for every micro-batch
// of every rank, summed over all ranks. Recomputed forwards are not counted: MFU measures the
// model's work, not the hardware's (Chowdhery et al. 2022, PaLM, appendix B), so recomputing is a
// cost it shows. `loom simulate` reports the hardware FLOP/s with recompute apart.
// The peak per rank is the source each side has, for model.dtype's products: a plan's the cluster
// file's device.peak_flops (a device is a rank); a run's --peak-flops, else the GEMM peak rank 0
// measured at start with the run's threads (plan::measure_gemm_peak). Against clusters/local.toml
// (one thread per rank) the two agree for a run with train.threads = 1.
#include <cstdint>

#include "loom/plan/run_plan.h"

namespace loom::plan {

// The model FLOPs of one step of `plan`, summed over its ranks (NOTE [MFU]).
double step_model_flops(const RunPlan& plan);

// NOTE [MFU]'s ratio; 0 where the step or the peak is not positive.
double model_flops_utilisation(double step_model_flops, double step_s, double peak_flops_per_rank, int64_t ranks);

}  // namespace loom::plan

#pragma once
// The layout-equivalence harness: every rank trains the config once serially (a world of one,
// in this process) and once under the layout over the whole world, then compares per-step
// losses and final weights. Later parallelism issues add their layouts through `run_layout`.
#include <gtest/gtest.h>

#include "loom/dist/null_communicator.h"
#include "loom/train/trainer.h"
#include "unit/layer_check.h"

namespace loom::test {

struct TrainedRun {
  std::vector<train::StepRecord> records;
  std::vector<std::string> names;
  std::vector<at::Tensor> weights;  // full (unsharded) values, by parameter
  dist::CommStats comm;
};

inline TrainedRun train_run(const Config& config, dist::Communicator& world) {
  train::Trainer trainer(config, world);
  TrainedRun run;
  run.records = trainer.run({.peak_flops = 1e9});
  for (nn::Param* p : trainer.model().params()) {
    run.names.push_back(p->name);
    run.weights.push_back(p->value.clone());
  }
  run.comm = trainer.comm_stats();
  return run;
}

inline TrainedRun run_serial(Config config) {
  config.parallel = ParallelConfig{};
  dist::NullCommunicator alone;
  return train_run(config, alone);
}

// Losses within `loss_tol` and weights within `weight_tol` (relative), step by step.
inline void expect_same_training(const TrainedRun& got, const TrainedRun& want, double loss_tol, double weight_tol) {
  ASSERT_EQ(got.records.size(), want.records.size());
  for (size_t i = 0; i < want.records.size(); ++i) {
    const double g = got.records[i].loss, w = want.records[i].loss;
    EXPECT_LE(std::abs(g - w), loss_tol * std::abs(w)) << "step " << i << ": loss " << g << " vs serial " << w;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (size_t i = 0; i < want.weights.size(); ++i) {
    SCOPED_TRACE(want.names[i]);
    EXPECT_TENSOR_NEAR(got.weights[i], want.weights[i], weight_tol);
  }
}

}  // namespace loom::test

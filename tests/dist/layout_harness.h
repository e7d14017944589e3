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
  std::vector<at::Tensor> weights;  // this rank's values (a shard where the layout shards)
  std::vector<Shard> shards;
  dist::CommStats comm;
};

inline TrainedRun train_run(const Config& config, dist::Communicator& world) {
  train::Trainer trainer(config, world);
  TrainedRun run;
  run.records = trainer.run({.peak_flops = 1e9});
  for (nn::Param* p : trainer.model().params()) {
    run.names.push_back(p->name);
    run.weights.push_back(p->value.clone());
    run.shards.push_back(p->shard);
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
    const Shard& shard = got.shards[i];
    if (shard.dim < 0) {
      EXPECT_TENSOR_NEAR(got.weights[i], want.weights[i], weight_tol);
      continue;
    }
    // The serial slice this shard holds; rows past the serial size are vocabulary padding.
    const int64_t serial_size = want.weights[i].size(shard.dim);
    const int64_t real = std::clamp<int64_t>(serial_size - shard.start, 0, shard.length);
    if (real == 0) continue;
    EXPECT_TENSOR_NEAR(got.weights[i].narrow(shard.dim, 0, real), want.weights[i].narrow(shard.dim, shard.start, real),
                       weight_tol);
  }
}

}  // namespace loom::test

#pragma once
// The layout-equivalence harness: every rank trains the config once serially (a world of one,
// in this process) and once under the layout over the whole world, then compares per-step
// losses and final weights. Later parallelism issues add their layouts through `run_layout`.
#include <functional>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "loom/dist/null_communicator.h"
#include "dist/world.h"
#include "loom/train/equivalence.h"
#include "loom/train/trainer.h"
#include "tiny_configs.h"
#include "unit/layer_check.h"

namespace loom::test {

// The number and bytes of each operation recorded on `axis`.
inline std::map<std::string, std::pair<int64_t, int64_t>> ops_on(const dist::CommStats& stats,
                                                                 const std::string& axis) {
  std::map<std::string, std::pair<int64_t, int64_t>> ops;
  for (const auto& r : stats.records)
    if (r.axis == axis) ops[r.op].first += 1, ops[r.op].second += r.bytes;
  return ops;
}

struct TrainedRun {
  std::vector<train::StepRecord> records;
  std::vector<std::string> names;
  std::vector<at::Tensor> weights;  // this rank's values (a shard where the layout shards)
  std::vector<Shard> shards;
  dist::CommStats comm;
};

// A layout suite pins the embedding tables' path (parallel.sparse "on" or "off"): "auto" chooses
// by timing (NOTE [Table paths]), so a suite left to it would test one path in one run and the
// other in the next. The builders above pin "off"; the sparse suites set "on" as they need, and
// only SparseParallelAuto and the checkpoints' carry-over cases run "auto", on purpose.
// `prepare`, if given, sets up the trainer's model before the first step (a test's starting point).
inline TrainedRun train_run(const Config& config, dist::Communicator& world,
                            const std::function<void(train::Trainer&)>& prepare = {}) {
  EXPECT_TRUE(config.parallel.sparse != SparseMode::Auto || config.parallel.dp * config.parallel.sp == 1)
      << "a layout suite pins parallel.sparse (\"on\" or \"off\"): \"auto\" would choose by timing";
  train::Trainer trainer(config, world);
  if (prepare) prepare(trainer);
  TrainedRun run;
  run.records = trainer.run({.peak_flops = 1e9});
  for (nn::Param* p : trainer.model().params()) {
    run.names.push_back(p->name);
    run.weights.push_back(trainer.value_of(*p).cpu().clone());  // a sparse table gathered from its owners
    run.shards.push_back(p->part());
  }
  run.comm = trainer.comm_stats();
  return run;
}

inline TrainedRun run_serial(const Config& config, const std::function<void(train::Trainer&)>& prepare = {}) {
  dist::NullCommunicator alone;
  return train_run(train::serial_config(config), alone, prepare);
}

// Collective over world(): the ranks' parameters together hold every element of every serial
// parameter (a layout that dropped a slice would otherwise compare only what it kept).
inline void expect_full_coverage(const TrainedRun& got, const TrainedRun& want) {
  for (size_t s = 0; s < want.names.size(); ++s) {  // the serial list: the same order on every rank
    at::Tensor covered = at::zeros(want.weights[s].sizes(), at::kLong);
    for (size_t g = 0; g < got.names.size(); ++g) {
      if (got.names[g] != want.names[s]) continue;
      const Shard& shard = got.shards[g];
      if (shard.dim < 0) {
        covered.fill_(1);
        continue;
      }
      const int64_t real = std::clamp<int64_t>(covered.size(shard.dim) - shard.start, 0, shard.length);
      if (real > 0) covered.narrow(shard.dim, shard.start, real).fill_(1);
    }
    world().all_reduce(covered, dist::ReduceOp::Max);
    EXPECT_EQ(covered.min().item<int64_t>(), 1) << want.names[s] << ": some elements are held by no rank";
  }
}

// Losses within `loss_tol` and weights within `weight_tol` (relative), step by step. Parameters
// are matched by name: a pipeline stage holds only its layers' (every serial one is checked on
// the rank that holds it).
// Collective (the coverage check first, before any assertion can return early).
inline void expect_same_training(const TrainedRun& got, const TrainedRun& want, double loss_tol, double weight_tol) {
  expect_full_coverage(got, want);
  ASSERT_EQ(got.records.size(), want.records.size());
  for (size_t i = 0; i < want.records.size(); ++i) {
    const double g = got.records[i].loss, w = want.records[i].loss;
    EXPECT_LE(std::abs(g - w), loss_tol * std::abs(w)) << "step " << i << ": loss " << g << " vs serial " << w;
    // The global gradient norm (what clipping sees) covers every parameter of every rank once.
    const double gn = got.records[i].grad_norm, wn = want.records[i].grad_norm;
    EXPECT_LE(std::abs(gn - wn), weight_tol * std::abs(wn)) << "step " << i << ": grad norm " << gn << " vs " << wn;
  }
  ASSERT_FALSE(got.weights.empty());
  for (size_t g = 0; g < got.weights.size(); ++g) {
    SCOPED_TRACE(got.names[g]);
    const auto it = std::find(want.names.begin(), want.names.end(), got.names[g]);
    ASSERT_NE(it, want.names.end()) << "no serial parameter of this name";
    const at::Tensor& serial = want.weights[it - want.names.begin()];
    const Shard& shard = got.shards[g];
    if (shard.dim < 0) {
      EXPECT_TENSOR_NEAR(got.weights[g], serial, weight_tol);
      continue;
    }
    // The serial slice this shard holds; rows past the serial size are vocabulary padding.
    const int64_t serial_size = serial.size(shard.dim);
    const int64_t real = std::clamp<int64_t>(serial_size - shard.start, 0, shard.length);
    if (real == 0) continue;
    EXPECT_TENSOR_NEAR(got.weights[g].narrow(shard.dim, 0, real), serial.narrow(shard.dim, shard.start, real),
                       weight_tol);
  }
}

// Every loss, gradient norm and weight of `got` equal to `want`'s, to the last bit (two runs of
// one layout that may differ only in a choice that must not change the numbers).
inline void expect_identical_training(const TrainedRun& got, const TrainedRun& want) {
  ASSERT_EQ(got.records.size(), want.records.size());
  for (size_t i = 0; i < want.records.size(); ++i) {
    EXPECT_EQ(got.records[i].loss, want.records[i].loss) << "step " << i;
    EXPECT_EQ(got.records[i].grad_norm, want.records[i].grad_norm) << "step " << i;
  }
  ASSERT_EQ(got.names, want.names);
  for (size_t i = 0; i < want.weights.size(); ++i)
    EXPECT_TRUE(at::equal(got.weights[i], want.weights[i]))
        << want.names[i] << ": max |difference| " << (got.weights[i] - want.weights[i]).abs().max().item<double>();
}

}  // namespace loom::test

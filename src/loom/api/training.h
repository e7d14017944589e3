#pragma once
// A training run from C++: what `loom train` does with a config, for a program of one's own
// (docs/cpp-api.md). Construction runs every check the CLI runs on bad input (the config, the
// model kind's own checks, the layout against the world, the data, memory), agreed by every rank
// before anything is allocated or sent; parallel.auto = true chooses the layout as the CLI does
// (NOTE [parallel.auto]). Every rank of `world` constructs it and calls run().
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "loom/core/config.h"
#include "loom/core/rng.h"
#include "loom/dist/communicator.h"
#include "loom/dist/device_backend.h"
#include "loom/models/registry.h"

namespace loom::train {
class Trainer;
}

namespace loom {

// One step's figures, the same on every rank (what `loom train --metrics` writes, in part).
struct StepMetrics {
  int64_t step = 0;  // counted from 1
  double loss = 0;   // the global batch's mean loss
  double lr = 0;
  double grad_norm = 0;  // before clipping, over the whole model
  double items_per_s = 0;  // the model kind's items (tokens or samples) per second
  double step_ms = 0;
  int64_t peak_bytes = 0;  // the largest over ranks
  std::optional<double> val_loss;  // after a validation pass (train.eval_every)
};

struct RunOptions {
  std::string metrics_path;          // JSON Lines, one object per step, written by world rank 0 ("" none)
  std::string trace_path;            // a Chrome trace of every rank's actions ("" none)
  std::ostream* progress = nullptr;  // rank 0's progress lines (nullptr: quiet)
  // Called on every rank after each step: the metrics callback.
  std::function<void(const StepMetrics&)> on_step;
  int64_t stop_after = 0;            // end after this step, as a preemption would (0: train.steps)
};

// A parameter as this rank holds it: its full name and shape, the slice of it this rank has (its
// tensor-parallel shard; dim -1: all of it) and that slice's values.
struct ParameterValue {
  std::string name;
  std::vector<int64_t> full_shape;
  Shard shard;
  at::Tensor value;
};

class Training {
 public:
  // `kinds`: the model kinds model.kind may name (the built-in ones, or a copy with one's own
  // added: NOTE [Model kinds are a value]). `resume`: "" (fresh), "auto" or a checkpoint directory.
  // `devices`: the backend for GPU tensors (the Runtime's device_backend()); null: GPU ranks
  // communicate through `world`'s host buffers.
  Training(Config config, dist::Communicator& world, const models::ModelKinds& kinds = models::ModelKinds::builtin(),
           const std::string& resume = "", const dist::DeviceBackend* devices = nullptr);
  ~Training();
  Training(Training&&) noexcept;
  Training& operator=(Training&&) noexcept;

  std::vector<StepMetrics> run(const RunOptions& options = {});
  // The mean loss over data.valid (collective; needs data.valid).
  double validation_loss();
  const Config& config() const;  // as run: parallel.auto's layout in place
  std::string plan() const;      // what `loom config --print --ranks N` prints for it
  // Collective (a table on the sparse path is gathered from its owners): this rank's parameters.
  std::vector<ParameterValue> parameters() const;
  int64_t start_step() const;    // the step a resumed run starts from (0: fresh)

 private:
  std::unique_ptr<train::Trainer> trainer_;
};

}  // namespace loom

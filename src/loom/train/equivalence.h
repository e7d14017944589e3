#pragma once
// NOTE [Layout equivalence]
// The rule above all others: any parallel layout trains the same model as one process. This is
// the check, as a library call: every rank trains the config once serially (a world of one, in
// this process: the same model, data, seed and steps with every parallel degree 1 and the memory
// policy left at its default, which changes memory, not the model) and once under its layout
// over `world`, then compares each step's loss and gradient norm and the final value of every
// parameter each rank holds (its tp shard, its stage's layers) with the serial run's. Run it in
// float64, where a correct layout agrees to about 1e-12 (float32 would hide a real bug in its
// rounding); loom's own layout tests hold every layout to 1e-9.
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/models/registry.h"

namespace loom::train {

// The same on every rank: errors are the largest over ranks, counts their sums.
struct Equivalence {
  int64_t steps = 0;         // compared, each run's
  double loss = 0;           // largest relative difference of a step's loss
  double grad_norm = 0;      // ... of a step's global gradient norm (what clipping sees)
  double weights = 0;        // ... of a parameter's final value (||got - serial|| / ||serial||)
  int64_t compared = 0;      // parameter shards compared, over every rank
  std::vector<std::string> problems;  // what could not be compared (a parameter no rank holds, ...)

  double worst() const;  // infinity after a problem
  bool passed(double tolerance) const { return worst() <= tolerance; }
  std::string describe() const;  // one line
};

// The serial run of `config`: every parallel degree 1 and the memory policy at its default;
// parallel.sparse stays, since it picks the tables' optimizer (lazy or dense AdamW): the model's.
Config serial_config(const Config& config);

// Collective over `world`: every rank calls it with the same config. Throws InputError (agreed
// by every rank) for a config the layout or the serial run refuses.
Equivalence compare_with_serial(const Config& config, dist::Communicator& world,
                                const models::ModelKinds& kinds = models::ModelKinds::builtin());

}  // namespace loom::train

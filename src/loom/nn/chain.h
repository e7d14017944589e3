#pragma once
// A chain of layers at sub-block granularity: what a model is, and what a pipeline stage holds of
// it. It knows nothing about parallelism: a layout decides how the chain is cut, sharded and
// replicated.
#include <memory>
#include <vector>

#include "loom/nn/layer.h"

namespace loom::nn {

struct Chain {
  std::vector<std::unique_ptr<Layer>> chain;

  std::vector<Param*> params() const;
  std::vector<Buffer> buffers() const;
  int64_t param_count() const;
  // Every dense parameter from (seed, name): the same values whatever the layout (tables on the
  // sparse path initialise their owned rows the same way: SparseTable::initialise), with
  // `options`' type, on its device.
  void initialise(uint64_t seed, const at::TensorOptions& options);
  Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const;
};

}  // namespace loom::nn

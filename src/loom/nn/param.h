#pragma once
// A trainable parameter: its full (unsharded) name and shape, the part of it this rank holds, and
// its value and gradient. Gradients accumulate across micro-batches until the optimizer step.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "loom/core/rng.h"

namespace loom::nn {

// A table whose rows live on their owner ranks (the sparse path, NOTE [Sparse exchange]): what a
// layer asks of it. parallel::SparseTable implements it; the layers never see the exchange.
class SparseRows {
 public:
  virtual ~SparseRows() = default;
  // Collective over the table's replicas: the rows of `ids` (this rank's lookups this step, any
  // shape, repeats allowed, -1 = not this tp rank's row), fetched from their owners.
  virtual void pull(const at::Tensor& ids) = 0;
  // Rows of `ids` (pulled before), [ids.numel(), d]; zeros for -1.
  virtual at::Tensor lookup(const at::Tensor& ids) const = 0;
  // Adds `grads` [ids.numel(), d] to the rows of `ids`.
  virtual void accumulate(const at::Tensor& ids, const at::Tensor& grads) = 0;
  // Collective: every rank gets the whole table (this tp shard), for inspection and tests.
  virtual at::Tensor gather_full() const = 0;
};

enum class Init { Zeros, Ones, Normal };

struct Param {
  std::string name;                 // e.g. "blocks.3.attn.qkv.weight"
  std::vector<int64_t> full_shape;  // shape of the unsharded parameter
  // Trailing rows of full_shape[0] that pad a vocabulary split over tp (NOTE [Vocabulary
  // padding]): not part of the model, initialised to zero (so they stay zero), never saved.
  int64_t padding_rows = 0;
  Shard shard;                      // which slice of it this rank holds (dim -1 = all)
  Init init = Init::Zeros;
  double init_std = 0.0;            // for Init::Normal
  bool weight_decay = false;        // AdamW decays matrices, not biases or norm gains
  // The gradient covers only this tp rank's tokens (a sequence-sharded norm or position table
  // under parallel.tp_sequence) and is summed over tp once per step (SequenceGradReducer).
  bool tp_partial = false;
  // A table read by row lookups (an embedding): a step's gradient touches only the rows its batch
  // looks up, so under parallel.sparse = "auto" it trains on the sparse path.
  bool embedding = false;
  // Set on that path: the table's rows live on their owners (NOTE [Sparse exchange]); `value`
  // and `grad` stay undefined, and the layer reads and accumulates rows through the table.
  SparseRows* sparse = nullptr;
  at::Tensor value;
  at::Tensor grad;                  // same shape as value; zeroed by zero_grad
  // value rounded to the activations' type under mixed precision (NOTE [Mixed precision]),
  // refreshed after each optimizer step; undefined otherwise. Products read compute_value(p).
  at::Tensor compute;

  // The model's shape: full_shape without the padding rows.
  std::vector<int64_t> model_shape() const {
    std::vector<int64_t> shape = full_shape;
    if (padding_rows > 0) shape[0] -= padding_rows;
    return shape;
  }

  // Elements of this rank's part (its tp shard; all of it for a table on the sparse path).
  int64_t numel() const {
    int64_t n = 1;
    for (size_t d = 0; d < full_shape.size(); ++d) n *= static_cast<int64_t>(d) == shard.dim ? shard.length : full_shape[d];
    return n;
  }
};

// Allocates value and grad with `options` (the type and the device) and fills value from
// (seed, name): layout-independent, and device-independent (the random values are drawn on the
// host and copied: NOTE [Devices]).
void initialise(Param& p, uint64_t seed, const at::TensorOptions& options);
// Zeroes the padding rows among `rows` of p, which hold the parameter's rows from `first_row` on.
void zero_padding(const Param& p, at::Tensor& rows, int64_t first_row);
void zero_grad(Param& p);

}  // namespace loom::nn

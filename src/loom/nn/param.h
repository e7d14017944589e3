#pragma once
// A trainable parameter: its full (unsharded) name and shape, the part of it this rank holds, and
// its value and gradient. Gradients accumulate across micro-batches until the optimizer step.
#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/mesh_placement.h"
#include "loom/core/options.h"
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

// NOTE [Sliced reads]: a parameter its layer can read a block of rows at a time (Param::sliceable:
// the LM head's [vocab, d] matrix, whose products separate by rows) need not be whole at once.
// Under ZeRO-3 the residency (replicas/sharded_params.h) cuts it into RowSlices, each a unit of
// its own sharded over the group, and sets Param::slices: the layer asks for each slice's values
// (gathered, the next slice's gather started behind it, the others freed) and for each slice's
// gradient buffer, and says when a slice's gradient is complete (it is reduce-scattered at once).
// The head's working set is then two slices of values and a few of gradients instead of its
// whole matrix twice. The products are the same: each logit the same dot product; dx and the
// weight gradient summed over the slices (dx in another order, equal within rounding).
struct Param;
class SliceSource {
 public:
  virtual ~SliceSource() = default;
  // Slice k's rows, whole, in the products' type; valid until the layer asks for slice k + 2.
  virtual at::Tensor value(Param& p, int64_t slice) = 0;
  // A zeroed buffer for slice k's gradient, [its rows, ...] in the gradients' type.
  virtual at::Tensor grad(Param& p, int64_t slice) = 0;
  // Slice k's gradient of this micro-batch is complete: the buffer goes to the reduction.
  virtual void grad_done(Param& p, int64_t slice) = 0;
};

// How a sliceable parameter of `rows` rows (this rank's part) is cut: kCount slices of `each`
// rows (the last shorter), fewer when rows are fewer.
struct RowSlices {
  static constexpr int64_t kCount = 16;
  explicit RowSlices(int64_t rows) : rows(rows), each((rows + kCount - 1) / kCount) {}
  int64_t count() const { return each == 0 ? 0 : (rows + each - 1) / each; }
  int64_t begin(int64_t k) const { return k * each; }
  int64_t length(int64_t k) const { return std::min(each, rows - k * each); }
  int64_t rows, each;
};

enum class Init { Zeros, Ones, Normal };

struct Param {
  std::string name;                 // e.g. "blocks.3.attn.qkv.weight"
  std::vector<int64_t> full_shape;  // shape of the unsharded parameter
  // Trailing rows of full_shape[0] that pad a vocabulary split over tp (NOTE [Vocabulary
  // padding]): not part of the model, initialised to zero (so they stay zero), never saved.
  int64_t padding_rows = 0;
  // How it lies over the mesh's named axes that split it or its gradient (NOTE [Parameter
  // placements]): a tp-sharded weight names tp; a parameter held whole names no axis.
  std::vector<AxisPlacement> placements;
  Init init = Init::Zeros;
  double init_std = 0.0;            // for Init::Normal
  bool weight_decay = false;        // AdamW decays matrices, not biases or norm gains
  // A table read by row lookups (an embedding): a step's gradient touches only the rows its batch
  // looks up, so under parallel.sparse = "auto" it trains on the sparse path.
  bool embedding = false;
  // A routed expert's stacked weights (NOTE [Mixture-of-experts block]): parallel.ep divides them.
  bool expert = false;
  // Set on that path: the table's rows live on their owners (NOTE [Sparse exchange]); `value`
  // and `grad` stay undefined, and the layer reads and accumulates rows through the table.
  SparseRows* sparse = nullptr;
  // Its layer reads it through `slices` when one is set (NOTE [Sliced reads]); set by ZeRO-3.
  bool sliceable = false;
  SliceSource* slices = nullptr;
  at::Tensor value;
  at::Tensor grad;                  // same shape as value; zeroed by zero_grad
  // value rounded to the activations' type under mixed precision (NOTE [Mixed precision]),
  // refreshed after each optimizer step; undefined otherwise. Products read compute_value(p).
  at::Tensor compute;
  // How products read it under bfloat16 (NOTE [bf16 products]): natively, or widened to float32;
  // set once for a built model's parameters (nn::set_products).
  Bf16Products products = Bf16Products::Native;

  // The model's shape: full_shape without the padding rows.
  std::vector<int64_t> model_shape() const {
    std::vector<int64_t> shape = full_shape;
    if (padding_rows > 0) shape[0] -= padding_rows;
    return shape;
  }

  // NOTE [Parameter placements]: the entry for `axis`, or null when it names none.
  const AxisPlacement* on(std::string_view axis) const;
  // Its value's placement over `axis` (Replicate where it names none).
  Placement value_on(std::string_view axis) const;
  // Its gradient's after the backward (where it names none: Partial on a data axis, else Replicate).
  Placement grad_on(std::string_view axis) const;
  // The slice of full_shape this rank holds (dim -1: all of it), from the axis whose value is Shard:
  // its real rows, [r L, r L + real_length) with L = ceil(size / n). A parameter's pieces hold no
  // padding of their own: every sharded parameter divides evenly or pads its full_shape (the
  // vocabulary: NOTE [Vocabulary padding]); the padded pieces of NOTE [Placements] are the
  // placement collectives' buffers.
  Shard part() const;
  // Its shape on this rank: full_shape with the sharded dimension cut to the part.
  std::vector<int64_t> part_shape() const;
  // Elements of this rank's part (its tp shard; all of it for a table on the sparse path).
  int64_t numel() const;
};

// NOTE [Parameter placements]: a norm's or position table's under parallel.tp_sequence (each tp
// rank saw a slice of the sequence, so its gradient is a summand over tp); none otherwise.
inline std::vector<AxisPlacement> tp_sequence_placements(bool sequence_sharded) {
  if (!sequence_sharded) return {};
  return {AxisPlacement::summed("tp")};
}

// A flat run of `numel` elements of `of`'s part, as a parameter of its own (ZeRO's AdamW steps
// such runs): named `name`, decayed like `of`, and sharded over each axis that shards `of` (with
// the run as its whole piece), so the gradient norm sums it over the axes where it sums `of`.
Param flat_run(const Param& of, std::string name, int64_t numel);

// Allocates value and grad with `options` (the type and the device) and fills value from
// (seed, name): layout-independent, and device-independent (the random values are drawn on the
// host and copied: NOTE [Devices]).
void initialise(Param& p, uint64_t seed, const at::TensorOptions& options);
// Zeroes the padding rows among `rows` of p, which hold the parameter's rows from `first_row` on.
void zero_padding(const Param& p, at::Tensor& rows, int64_t first_row);
void zero_grad(Param& p);

}  // namespace loom::nn

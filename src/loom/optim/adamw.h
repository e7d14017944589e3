#pragma once
// AdamW with decoupled weight decay (the update libtorch's and PyTorch's AdamW make):
//   p -= lr * wd * p                      (only for params with weight_decay set)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <vector>

#include "loom/nn/param.h"

namespace loom::optim {

// NOTE [Lazy rows of dense tables]
// train.table_update = "lazy" updates only the rows of an embedding table that some replica looked
// up this step (LazyAdam): untouched rows keep their value and both moments, and skip decay. On
// the sparse path the owners know those rows (parallel/sparse_table.h); a dense table (parallel.
// sparse = "off", or "auto" choosing dense) lives in the flat buffers, updated by AdamW or by
// ZeRO-1's shard of it, neither of which knows rows. A RowFilter tells them: asked about a
// parameter's value (or any contiguous part of it, such as a ZeRO shard's piece), it names the
// elements that update this step, or none at all to update every element. The filter finds the
// table by the memory the value views (replicas/sparse_tables.h), so whoever cuts the flat buffer
// needs no change. The union of the rows looked up is one float per row reduced over the replica
// group (SparseTables::pull): 1/d_model of the table's gradient bytes.
class RowFilter {
 public:
  virtual ~RowFilter() = default;
  // Indices (int64, sorted) into value.view(-1) of the elements that update this step, or an
  // undefined tensor: every element updates.
  virtual at::Tensor elements_of(const at::Tensor& value) const = 0;
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  const RowFilter* lazy_rows = nullptr;  // lazy dense tables (NOTE [Lazy rows of dense tables]); null: none
};

// One AdamW update of contiguous tensors of one shape, at step `step` (1-based, for the bias
// corrections), with the parameter's decay factor 1 - lr * weight_decay (1 = no decay).
// AdamW::step and the lazy update of sparse tables' touched rows (parallel/sparse_table.h) both
// run it, so a row updates the same way on either path.
void adamw_update(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, double lr, double decay,
                  int64_t step, const AdamWOptions& options);
// The same update as whole-tensor kernels, for tensors off the host (a GPU's); adamw_update takes
// it for them. On the host it gives adamw_update's values (its test).
void adamw_update_by_kernels(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, double lr,
                             double decay, int64_t step, const AdamWOptions& options);
// The same update restricted to the elements `index` (int64) of the flattened tensors; the others
// keep their value and moments. `value` may be a view (of a flat buffer): it is written in place.
void adamw_update_elements(at::Tensor& value, const at::Tensor& grad, at::Tensor& m, at::Tensor& v,
                           const at::Tensor& index, double lr, double decay, int64_t step, const AdamWOptions& options);

class AdamW {
 public:
  AdamW(std::vector<nn::Param*> params, AdamWOptions options);
  void step(double lr);  // uses each Param::grad as it is (clip before)
  int64_t step_count() const { return step_; }
  // A resumed run's steps so far (the bias corrections continue from them).
  void set_step_count(int64_t steps) { step_ = steps; }
  const std::vector<nn::Param*>& params() const { return params_; }
  // The first and second moments of params()[i] (its shape), for checkpoints.
  const at::Tensor& exp_avg(size_t i) const { return state_[i].m; }
  const at::Tensor& exp_avg_sq(size_t i) const { return state_[i].v; }

 private:
  struct State {
    at::Tensor m, v;
  };
  std::vector<nn::Param*> params_;
  std::vector<State> state_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace loom::optim

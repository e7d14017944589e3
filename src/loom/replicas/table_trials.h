#pragma once
// The dense path's side of parallel.sparse = "auto" (NOTE [Table paths]).
#include <vector>

#include "loom/core/options.h"
#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/nn/param.h"
#include "loom/optim/adamw.h"

namespace loom::replicas {

// NOTE [Table paths]
// parallel.sparse = "auto" chooses, per embedding table, the path that costs its step less; the
// choice never changes the model (train.table_update decides the math on both paths), only the
// time and the memory, and where it could change the last bits the run says how to pin it (NOTE
// [Reproducible table choices]). At start-up, before any parameter is allocated:
//   - a group of one replica exchanges nothing: dense;
//   - when the run with every table dense would not fit in memory (the plan's estimate against
//     memory.budget or this machine), the sparse path;
//   - otherwise short trials on scratch tensors of the table's shape, each the median of three:
//     sparse  the step-0 micro-batches' exchange (pull, push) and the owner's update at the
//             chosen partition count (parallel/sparse_table.h), the push made while the rest of
//             the table's gradient bucket (its companions) is being all-reduced, as in a step;
//     dense   zeroing the table's gradient, the all-reduce of its bucket (table and companions)
//             over the replicas minus what the backward after it hides (the all-reduce starts
//             asynchronously, as the bucketed reducer starts it, while this rank runs matrix
//             products of the FLOPs of the layers that follow the table in backward, testing the
//             request between them as the reducer does between layers; the exposed part is the
//             time beyond those products run alone), and AdamW over the table (every row; or,
//             "lazy", the union of the looked-up rows, whose one-float-per-row mask is
//             all-reduced first).
//     Both sides pay the companions' all-reduce: the difference is what the table adds to it.
//     Each rank's times go through one all-reduce (max) over the replicas and one over tp, so
//     every rank holding a piece of the table takes the same decision from the same numbers: the
//     sparse path when its time is below the dense one.
// Not measured: the lookups and gradient sums inside the layer, alike on both paths but for a
// sorted search per id on the sparse path. The console's first lines and every metrics record
// name each table's path, the reason and the two times.
// Where a table sits in the step, for its trials.
struct TableContext {
  double window_flops = 0;  // backward FLOPs after the table's gradient is final, on this rank
  int64_t companions = 0;   // dense gradient elements in the table's all-reduce bucket, the table's aside
};

// Each of `tables`' context in `model` (this rank's layers): the backward after it, and its bucket
// companions were it dense, the buckets cut as replicas::GradientReducer cuts them (parameters in
// reverse chain order, a new bucket once one holds `bucket_elements`; tables counted dense).
std::vector<TableContext> table_contexts(const models::Model& model, const std::vector<nn::Param*>& tables,
                                         int64_t batch, int64_t seq, int64_t bucket_elements);

struct DenseTrial {
  TableContext context;
  TableUpdate update = TableUpdate::Dense;
  optim::AdamWOptions adamw;
  at::ScalarType dtype = at::kFloat;
  at::Tensor looked_up;  // "lazy": float [rows of this rank's part], 1 for the rows step 0 looks up here
};

// The elements (int64, sorted) of a [rows, width] table's flattened values in the rows `mask`
// (float [rows]) marks non-zero.
at::Tensor row_elements(const at::Tensor& mask, int64_t width);

// Seconds per step the dense path costs `table` (its shape and tp shard; nothing of it need be
// allocated): the median of three trials on scratch tensors. Collective over `group`.
double dense_trial_seconds(const nn::Param& table, const DenseTrial& trial, dist::Communicator& group);

}  // namespace loom::replicas

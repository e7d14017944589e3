#pragma once
// Sparse tables: embedding-like parameters trained on Parallax's sparse path.
//
// NOTE [Sparse exchange]
// A step touches only the rows of a table its batch looks up, so all-reducing the dense gradient
// of a large table moves mostly zeros. On the sparse path a table's rows are cut into P
// contiguous partitions, and partition k lives on rank k % n of the replica group (the dp group,
// or dp x sp): the colocated parameter servers of Parallax. Only the owner holds a row's value
// and its AdamW moments; no rank ever holds a dense gradient of the table. Per step:
//   pull   before forward: every rank sends the unique rows its micro-batches look up to their
//          owners (one all-to-all-v of ids) and receives their values (one all-to-all-v back);
//   lookup/accumulate   the layer reads rows from the pulled block and sums its gradient rows
//          into a block of the same shape: duplicate ids aggregate locally, never on the wire;
//   push   after backward: each rank sends its summed row gradients to the owners, in the order
//          of the ids it sent in `pull` (so ids do not travel twice), and the owner sums the
//          ranks' parts of every row it owns, in rank order from zero (0 + g_0 + g_1 + ...:
//          which rows an owner holds changes no row's sum); the owners' rows' squared norms are
//          gathered over the group for the global norm (NOTE [Table norms]);
//   step   AdamW on the owner, with the bias corrections of the global step count: under
//          train.table_update = "dense" over every row it owns (rows no rank touched see a zero
//          gradient: their moments decay and weight decay applies, exactly dense AdamW); under
//          "lazy" only over the rows some rank touched (value, moments and decay).
// The exchange never changes the model: the serial run (a group of one) and parallel.sparse =
// "off" (a replicated, all-reduced table; lazy through NOTE [Lazy rows of dense tables]) train the
// same numbers.
//
// With tensor parallelism the table is this rank's vocabulary shard; ids are local rows, and -1
// marks a token another tp rank owns (read as zeros, gradient dropped).
#include <memory>
#include <vector>

#include "loom/core/options.h"
#include "loom/dist/communicator.h"
#include "loom/nn/param.h"
#include "loom/optim/adamw.h"

namespace loom::parallel {

struct RowPartition {
  int64_t begin = 0, end = 0;  // rows [begin, end) of the table
  int owner = 0;               // rank of the replica group that holds them
};

// `partitions` near-equal contiguous row ranges of a `rows`-row table; partition k on rank k % ranks.
std::vector<RowPartition> partition_rows(int64_t rows, int64_t partitions, int ranks);

class SparseTable final : public nn::SparseRows {
 public:
  // `param`: the table (its full shape, and its shard under tensor parallelism); `group`: the
  // replicas that share its gradient; `partitions` >= 1 and <= the rows; `update`: AdamW over
  // every owned row or over the touched ones.
  SparseTable(nn::Param& param, dist::Communicator& group, int64_t partitions, optim::AdamWOptions options,
              TableUpdate update);

  // The owned rows from (seed, name), as the serial table's same rows; moments zero.
  void initialise(uint64_t seed, at::ScalarType dtype);
  // Owned rows of zeros (for partition trials: a scratch table with the real one's traffic).
  void initialise_zeros(at::ScalarType dtype);

  // nn::SparseRows: pull is a collective over the group.
  void pull(const at::Tensor& ids) override;
  at::Tensor lookup(const at::Tensor& ids) const override;
  void accumulate(const at::Tensor& ids, const at::Tensor& grads) override;
  // Collective: the summed row gradients go to their owners, and every owner's rows' squared
  // norms to every rank (NOTE [Table norms]).
  void push();

  // After push: the table's squared gradient norm (NOTE [Table norms]), the same number on every
  // rank of the group whatever the partition count, and the same as a dense table's
  // optim::grad_norm_square.
  double grad_norm_square() const { return norm_square_; }
  void scale_grads(double factor);
  // AdamW over the owned rows ("dense") or over the rows touched this step ("lazy").
  void step(double lr);
  // Seconds spent in pull, push and step since the last reset (the trials of parallel.sparse = "auto").
  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

  at::Tensor gather_full() const override;

  nn::Param& param() { return param_; }
  const nn::Param& param() const { return param_; }
  // The rows this rank owns as (first row of the full table, count), in the order of owned():
  // with owned(), exp_avg() and exp_avg_sq() (all [owned rows, d]) what a checkpoint stores.
  std::vector<std::pair<int64_t, int64_t>> owned_ranges() const;
  const at::Tensor& owned() const { return owned_; }
  const at::Tensor& exp_avg() const { return m_; }
  const at::Tensor& exp_avg_sq() const { return v_; }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t steps) { step_ = steps; }
  int64_t partitions() const { return static_cast<int64_t>(partitions_.size()); }
  int64_t rows() const { return rows_; }
  int64_t owned_rows() const { return owned_.defined() ? owned_.size(0) : 0; }
  int64_t touched_rows() const { return touched_.defined() ? touched_.numel() : 0; }
  // After push: the rows owned here that some rank touched (sorted) and their summed gradient.
  const at::Tensor& touched() const { return touched_; }
  const at::Tensor& touched_grad() const { return touched_grad_; }

 private:
  at::Tensor partition_of(const at::Tensor& rows) const;
  at::Tensor owned_index(const at::Tensor& rows) const;
  // Collective: the touched rows' squares of every owner, summed in row order.
  double gather_norm_square() const;

  nn::Param& param_;
  dist::Communicator& group_;
  optim::AdamWOptions options_;
  TableUpdate update_;
  double seconds_ = 0;
  int64_t rows_, width_, row_offset_;  // local rows, row width, first row in the full tensor
  std::vector<RowPartition> partitions_;
  at::Tensor part_begin_, part_owner_, part_offset_;  // per partition (int64)
  at::Tensor owned_, m_, v_;                          // this rank's partitions, in partition order
  int64_t step_ = 0;
  // One step's exchange.
  at::Tensor need_;                                 // sorted unique rows this rank looks up
  at::Tensor order_;                                // need_ in destination order: need_[order_]
  std::vector<int64_t> send_counts_, recv_counts_;  // rows to / from each rank
  at::Tensor pulled_, grads_;                       // [need, d]
  at::Tensor served_;                               // rows other ranks asked this owner for, by rank
  at::Tensor touched_, touched_index_, touched_grad_;  // owner: rows touched, their store index, gradient
  double norm_square_ = 0;                             // the whole table's, after push
};

// Parallax's partition-count model: the step's sparse time t(P) = a + b / P + c (P - 1), fitted
// by least squares to measured trials (at least three distinct P).
struct PartitionCost {
  double a = 0, b = 0, c = 0;
  double at(int64_t partitions) const;
};
PartitionCost fit_partition_cost(const std::vector<int64_t>& partitions, const std::vector<double>& seconds);
// The multiple of `multiple` in [multiple, max_partitions] the model predicts fastest (the
// smallest on ties).
int64_t best_partition_count(const PartitionCost& cost, int64_t max_partitions, int64_t multiple = 1);

}  // namespace loom::parallel

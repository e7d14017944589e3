#pragma once
// The embedding tables of one rank's layers and how each trains: on the sparse path (NOTE [Sparse
// exchange]) or dense in the flat buffers, chosen by parallel.sparse (NOTE [Table paths]); the
// sparse ones share one replica group and one partition count (NOTE [Partition count]); under
// train.table_update = "lazy" the dense ones update only the rows the group looked up (NOTE [Lazy
// rows of dense tables]).
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/options.h"
#include "loom/models/model.h"
#include "loom/parallel/sparse_table.h"
#include "loom/replicas/table_trials.h"

namespace loom::replicas {

// One table's path and why; the times are auto's trials (the group's slowest rank, ms per step;
// 0 when not measured).
struct TableChoice {
  std::string table;
  bool sparse = false;
  std::string reason;
  double sparse_ms = 0, dense_ms = 0;
  bool operator==(const TableChoice&) const = default;
};

struct TableOptions {
  SparseMode mode = SparseMode::On;        // parallel.sparse
  TableUpdate update = TableUpdate::Dense;  // train.table_update
  int64_t partitions = 0;                  // parallel.sparse_partitions; 0 = chosen by trials
  optim::AdamWOptions adamw;
  at::ScalarType dtype = at::kFloat;
  bool dense_fits = true;  // "auto": the run fits in memory with every table dense
  // "auto" resuming a run of the same layout: the saved run's choices and partition count, kept
  // instead of measured again (NOTE [Resuming]); empty: choose.
  std::vector<TableChoice> saved;
  int64_t saved_partitions = 0;
  // Where the tables sit in a step, for auto's trials (table_contexts): a micro-batch's samples
  // and tokens on this rank, and the gradient buckets' size in elements.
  int64_t batch = 1, seq = 1, bucket_elements = 0;
  // This rank's micro-batches of step 0: the trials' traffic (unused when nothing is measured).
  std::vector<nn::MicroBatch> step0;
};

// Whether choosing the tables' paths and partition count runs trials (and so reads step 0's
// micro-batches for TableOptions::step0).
bool tables_measure(SparseMode mode, int64_t partitions);

class SparseTables {
 public:
  // The embedding tables (Param::embedding) of `model`, this rank's layers, none allocated yet: each
  // on its path, chosen as options.mode says. The tables pull their rows through the layers'
  // pull_rows. A model without tables gives an empty set, whose every call does nothing.
  // Collective over `group` (the replicas) and, for auto's agreement, `tp`.
  SparseTables(models::Model& model, dist::Communicator& group, dist::Communicator& tp, const TableOptions& options);
  ~SparseTables();

  // Tables on the sparse path.
  size_t size() const { return tables_.size(); }
  const std::vector<TableChoice>& choices() const { return choices_; }
  // One line: each table's path and why; then "N sparse tables in P partitions over R ranks" and
  // how P was chosen, if any table is on the sparse path. "" when this rank has no table.
  std::string describe() const;
  // How to repeat the choices "auto" measured (NOTE [Reproducible table choices]); empty if none.
  std::string pin_hint() const;
  int64_t partitions() const { return tables_.empty() ? 0 : partitions_; }
  // (P, seconds) of each trial candidate; empty when the count was given or the group is one rank.
  const std::vector<std::pair<int64_t, double>>& trials() const { return trials_; }

  void initialise(uint64_t seed, at::ScalarType dtype);
  // The tables on the sparse path (for checkpoints).
  const std::vector<std::unique_ptr<parallel::SparseTable>>& tables() const { return tables_; }
  // Collective over the group, before the step's forward, with this step's micro-batches: tables
  // on the sparse path fetch their rows, lazy dense tables note the rows looked up, whose union
  // over the group starts reducing (finished by push).
  void pull(const std::vector<nn::MicroBatch>& microbatches);
  // The same fetch for a forward-only pass (validation): rows on the sparse path only; nothing is
  // noted for an update, so the next step trains as if the pass had not run.
  void pull_for_forward(const std::vector<nn::MicroBatch>& microbatches) {
    if (!tables_.empty()) pull_rows(microbatches);
  }
  // What AdamW asks which elements of a lazy dense table update; null when there is none.
  const optim::RowFilter* row_filter() const;
  // Collective: every table's row gradients to their owners. Returns the tables' squared norms
  // [replicated, tp-sharded] (NOTE [Table norms]), each the whole table's: the same on every rank
  // of the group, whatever the partition count.
  std::pair<double, double> push();
  // After push: the squared gradient norm of `table` (a table on the sparse path).
  double norm_square(const nn::Param& table) const;
  // AdamW on every table on the sparse path, its gradient first multiplied by `clip_factor`.
  void step(double lr, double clip_factor);

 private:
  class LazyRows;
  void pull_rows(const std::vector<nn::MicroBatch>& microbatches);
  std::vector<bool> saved_paths(const std::vector<nn::Param*>& tables, dist::Communicator& tp);
  std::vector<bool> choose_paths(const std::vector<nn::Param*>& tables, dist::Communicator& tp);
  std::vector<bool> measure_paths(const std::vector<nn::Param*>& tables, dist::Communicator& tp);
  // The partition count from timed trials, agreed over the group and tp (the same on every rank).
  int64_t choose_partitions(const std::vector<nn::Param*>& tables, dist::Communicator& tp);
  // Seconds per step of each table on the sparse path at `partitions`: the median of three runs
  // of the step-0 exchange and update on scratch tables of zeros (one value per table), the
  // pushes made while `companions` elements are all-reduced (their wait shared by the tables).
  std::vector<double> sparse_trial(const std::vector<nn::Param*>& tables, int64_t partitions, int64_t companions = 0);

  models::Model& model_;
  dist::Communicator& group_;
  TableOptions options_;
  int64_t partitions_ = 0;
  bool set_ = false;  // the count was given (parallel.sparse_partitions), not chosen
  std::vector<std::pair<int64_t, double>> trials_;
  std::vector<TableChoice> choices_;
  std::vector<std::unique_ptr<parallel::SparseTable>> tables_;
  std::unique_ptr<LazyRows> lazy_;  // lazy dense tables, if any
};

}  // namespace loom::replicas

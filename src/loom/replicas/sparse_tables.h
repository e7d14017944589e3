#pragma once
// The tables of one rank's layers on the sparse path (NOTE [Sparse exchange]), sharing one replica
// group and one partition count, and the choice of that count (NOTE [Partition count]).
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "loom/parallel/sparse_table.h"

namespace loom::replicas {

class SparseTables {
 public:
  // Puts every parameter of `tables` (non-empty) on the sparse path over `group`, `partitions`
  // row partitions each; 0 chooses the count from trials, each of which runs `pull` (the layers'
  // pull_rows for the step-0 micro-batches) against scratch tables of zeros in `dtype`.
  // Collective over `group`.
  SparseTables(const std::vector<nn::Param*>& tables, dist::Communicator& group, int64_t partitions,
               optim::AdamWOptions options, at::ScalarType dtype, const std::function<void()>& pull);

  size_t size() const { return tables_.size(); }
  // "N sparse tables in P partitions over R ranks", and how P was chosen.
  std::string describe() const;
  int64_t partitions() const { return partitions_; }
  // (P, seconds) of each trial candidate; empty when the count was given or the group is one rank.
  const std::vector<std::pair<int64_t, double>>& trials() const { return trials_; }

  void initialise(uint64_t seed, at::ScalarType dtype);
  // Collective: every table's row gradients to their owners. Returns the squared norms
  // [replicated, tp-sharded] of the owners' rows, summed over the group (owners hold disjoint rows).
  std::pair<double, double> push();
  // Lazy AdamW on every table, its gradient first multiplied by `clip_factor`.
  void step(double lr, double clip_factor);

 private:
  int64_t choose_partitions(const std::vector<nn::Param*>& tables, const std::function<void()>& pull);

  dist::Communicator& group_;
  optim::AdamWOptions options_;
  at::ScalarType dtype_;
  int64_t partitions_ = 0;
  bool set_ = false;  // the count was given (parallel.sparse_partitions), not chosen
  std::vector<std::pair<int64_t, double>> trials_;
  std::vector<std::unique_ptr<parallel::SparseTable>> tables_;
};

}  // namespace loom::replicas

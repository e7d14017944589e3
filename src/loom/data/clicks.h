#pragma once
// Synthetic click logs for the DLRM (BENCHMARKS.md's dlrm-sparse). Sample s, a pure function of
// (seed, s) like every data source, so every layout sees the same samples:
//   dense features   N(0, 1), model.dense_features of them;
//   categorical ids  per table, a bag of model.bag_size ids: a Zipf(data.zipf) rank over the
//                    table's rows, mapped through a per-table bijection of the rows (hot rows
//                    spread over the table, not all in the first partition);
//   label            a click drawn from a planted logistic model (a weight per row and per dense
//                    feature), so there is signal to learn.
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/nn/layer.h"

namespace loom::data {

class ClickSource {
 public:
  ClickSource(const ModelConfig& model, double zipf, uint64_t seed);

  // Micro-batch `index` of optimizer step `step`, samples as in the token sampler (sampler.h):
  // tokens [micro, tables x bag] row ids, dense [micro, features] float64, targets [micro] 0 / 1,
  // loss_scale 1 / global_batch (the loss is the mean over the global batch).
  nn::MicroBatch microbatch(int64_t global_batch, int64_t micro_batch, int64_t step, int64_t index) const;
  std::string describe() const;

  int64_t row_of(int64_t table, int64_t rank) const;  // the bijection: Zipf rank (0-based) -> row
  // A Zipf rank in [0, rows) from the uniform stream (key, counter * 64 + attempt).
  int64_t zipf_rank(uint64_t key, uint64_t counter) const;

 private:
  int64_t tables_, rows_, bag_, features_;
  double zipf_;
  uint64_t seed_;
  uint64_t stride_;            // coprime to rows_
  double h_first_, h_last_;    // the sampler's range H(1.5) - 1 .. H(rows + 0.5)
  double h_integral(double x) const;
  double h_integral_inverse(double y) const;
};

}  // namespace loom::data

#pragma once
// Click logs for the DLRM: `ClickData` hands out micro-batches of samples by global index, so
// every layout sees the same samples (the sampler's order, sampler.h).
//
// ClickSource: synthetic clicks (docs/workloads.md's dlrm-sparse). Sample s is a pure function of
// (seed, s):
//   dense features   N(0, 1), model.dense_features of them;
//   categorical ids  per table, a bag of model.bag_size ids: a Zipf(data.zipf) rank over the
//                    table's rows, mapped through a per-table bijection of the rows (hot rows
//                    spread over the table, not all in the first partition);
//   label            a click drawn from a planted logistic model (a weight per row and per dense
//                    feature), so there is signal to learn.
#include <memory>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/data_file.h"
#include "loom/nn/layer.h"

namespace loom::data {

class ClickData {
 public:
  virtual ~ClickData() = default;
  // Micro-batch `index` of optimizer step `step`, samples as in the token sampler (sampler.h):
  // tokens [micro, tables x bag] row ids, dense [micro, features] float64, targets [micro] 0 / 1,
  // loss_scale 1 / global_batch (the loss is the mean over the global batch).
  nn::MicroBatch microbatch(int64_t global_batch, int64_t micro_batch, int64_t step, int64_t index) const;
  virtual std::string describe() const = 0;

 protected:
  // Sample `s` into the row `i` of the three tensors of a micro-batch.
  virtual void sample(int64_t s, int64_t* ids, double* dense, int64_t* label) const = 0;
  int64_t tables_, rows_, bag_, features_;
  ClickData(const ModelConfig& model);
};

class ClickSource final : public ClickData {
 public:
  ClickSource(const ModelConfig& model, double zipf, uint64_t seed);
  std::string describe() const override;

  int64_t row_of(int64_t table, int64_t rank) const;  // the bijection: Zipf rank (0-based) -> row
  // A Zipf rank in [0, rows) from the uniform stream (key, counter * 64 + attempt).
  int64_t zipf_rank(uint64_t key, uint64_t counter) const;

 private:
  void sample(int64_t s, int64_t* ids, double* dense, int64_t* label) const override;
  double zipf_;
  uint64_t seed_;
  uint64_t stride_;            // coprime to rows_
  double h_first_, h_last_;    // the sampler's range H(1.5) - 1 .. H(rows + 0.5)
  double h_integral(double x) const;
  double h_integral_inverse(double y) const;
};

// clicks:PATH, a file of little-endian records, one per sample: the label (int64, 0 or 1), the
// dense features (float64 x model.dense_features), the ids (int64 x tables x bag_size, table by
// table). Sample s is record s mod the record count. Opening checks the whole file, read in pieces
// of DataFile::kScanChunk: its size is whole records, every label is 0 or 1 and every id is a row
// of its table (InputError otherwise). Records are read with positioned reads; a file that
// changes under a run is a loom::Error (NOTE [Data files change under a run]).
class ClickFile final : public ClickData {
 public:
  ClickFile(const std::string& path, const ModelConfig& model);
  std::string describe() const override;
  int64_t records() const { return records_; }
  static constexpr int64_t kWriteChunk = 65536;  // samples write_clicks generates at a time

 private:
  void sample(int64_t s, int64_t* ids, double* dense, int64_t* label) const override;
  // Record fields at `p` (record_bytes_ bytes) into the three outputs.
  void decode(const unsigned char* p, int64_t* ids, double* dense, int64_t* label) const;
  DataFile file_;
  int64_t records_ = 0, record_bytes_ = 0;
};

// Bytes of one clicks-file record for `model`: 8 x (1 + dense_features + tables x bag_size).
int64_t click_record_bytes(const ModelConfig& model);

// The data.source of a DLRM: "synthetic" or "clicks:PATH".
std::unique_ptr<ClickData> open_clicks(const Config& config);
// Writes samples [0, count) of `data` as a clicks file (the format above) through an OutputFile:
// `path` is replaced only when every record is written (NOTE [Output files]).
void write_clicks(const ClickData& data, int64_t count, const std::string& path);

}  // namespace loom::data

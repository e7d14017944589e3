#include "loom/data/clicks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <cstring>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/core/rng.h"

namespace loom::data {

namespace {

// expm1(t) / t and log1p(t) / t, both 1 at t = 0 (so the Zipf exponent 1 needs no special case).
double expm1_ratio(double t) { return std::abs(t) < 1e-8 ? 1.0 + t / 2 : std::expm1(t) / t; }
double log1p_ratio(double t) { return std::abs(t) < 1e-8 ? 1.0 - t / 2 : std::log1p(t) / t; }

}  // namespace

// NOTE [Zipf sampling]: ranks k = 1..n with P(k) proportional to h(k) = k^-q, drawn by
// rejection-inversion (Hoermann and Derflinger, ACM TOMACS 1996) in O(1) memory, so a table of
// any size costs nothing to sample. With H(x) the integral of h, ((x^(1-q) - 1) / (1 - q)), a
// uniform u over [H(1.5) - h(1), H(n + 0.5)] maps to x = H^-1(u) and k = round(x); k is accepted
// when u >= H(k + 0.5) - h(k). Each k's accepting interval has length exactly h(k), and since h
// is convex and decreasing the intervals do not overlap, so accepted ranks follow P exactly.
double ClickSource::h_integral(double x) const {
  const double log_x = std::log(x);
  return expm1_ratio((1.0 - zipf_) * log_x) * log_x;
}

double ClickSource::h_integral_inverse(double y) const {
  double t = y * (1.0 - zipf_);
  if (t < -1.0) t = -1.0;  // rounding at the range's end
  return std::exp(log1p_ratio(t) * y);
}

int64_t ClickSource::zipf_rank(uint64_t key, uint64_t counter) const {
  int64_t k = 1;
  for (uint64_t attempt = 0; attempt < 64; ++attempt) {  // accepts with probability > 1/2 each time
    const double u = h_last_ + uniform01(key, counter * 64 + attempt) * (h_first_ - h_last_);
    const double x = h_integral_inverse(u);
    k = std::clamp<int64_t>(static_cast<int64_t>(x + 0.5), 1, rows_);
    const double kd = static_cast<double>(k);
    if (u >= h_integral(kd + 0.5) - std::pow(kd, -zipf_)) break;
  }
  return k - 1;
}

ClickData::ClickData(const ModelConfig& model)
    : tables_(model.tables), rows_(model.table_rows), bag_(model.bag_size), features_(model.dense_features) {}

nn::MicroBatch ClickData::microbatch(int64_t global_batch, int64_t micro_batch, int64_t step, int64_t index) const {
  const int64_t first = step * global_batch + index * micro_batch, width = tables_ * bag_;
  at::Tensor ids = at::empty({micro_batch, width}, at::kLong);
  at::Tensor dense = at::empty({micro_batch, features_}, at::kDouble);
  at::Tensor labels = at::empty({micro_batch}, at::kLong);
  for (int64_t i = 0; i < micro_batch; ++i)
    sample(first + i, ids.data_ptr<int64_t>() + i * width, dense.data_ptr<double>() + i * features_,
           labels.data_ptr<int64_t>() + i);
  nn::MicroBatch mb;
  mb.tokens = ids;
  mb.dense = dense;
  mb.targets = labels;
  mb.loss_scale = 1.0 / static_cast<double>(global_batch);
  return mb;
}

ClickSource::ClickSource(const ModelConfig& model, double zipf, uint64_t seed)
    : ClickData(model), zipf_(zipf), seed_(seed) {
  h_first_ = h_integral(1.5) - 1.0;
  h_last_ = h_integral(static_cast<double>(rows_) + 0.5);
  stride_ = 0x9E3779B97F4A7C15ULL % static_cast<uint64_t>(rows_);
  while (std::gcd(stride_, static_cast<uint64_t>(rows_)) != 1) ++stride_;
}

int64_t ClickSource::row_of(int64_t table, int64_t rank) const {
  const auto rows = static_cast<unsigned __int128>(rows_);
  const auto shift = static_cast<unsigned __int128>(mix64(seed_ ^ static_cast<uint64_t>(table)) % rows_);
  return static_cast<int64_t>((static_cast<unsigned __int128>(rank) * stride_ + shift) % rows);
}

void ClickSource::sample(int64_t index, int64_t* id, double* x, int64_t* label) const {
  const uint64_t ids_key = stream_key(seed_, "clicks.ids"), dense_key = stream_key(seed_, "clicks.dense");
  const uint64_t label_key = stream_key(seed_, "clicks.label"), row_weight = stream_key(seed_, "clicks.row_weight");
  const uint64_t feature_weight = stream_key(seed_, "clicks.feature_weight");
  const int64_t width = tables_ * bag_;
  const auto s = static_cast<uint64_t>(index);
  double logit = -0.5;
  for (int64_t f = 0; f < tables_; ++f) {
    for (int64_t l = 0; l < bag_; ++l) {
      const int64_t row =
          row_of(f, zipf_rank(ids_key, s * static_cast<uint64_t>(width) + static_cast<uint64_t>(f * bag_ + l)));
      id[f * bag_ + l] = row;
      logit += 0.8 * standard_normal(row_weight, static_cast<uint64_t>(f * rows_ + row)) / static_cast<double>(bag_);
    }
  }
  for (int64_t j = 0; j < features_; ++j) {
    const double v = standard_normal(dense_key, s * static_cast<uint64_t>(features_) + static_cast<uint64_t>(j));
    x[j] = v;
    logit += 0.5 * standard_normal(feature_weight, static_cast<uint64_t>(j)) * v;
  }
  *label = uniform01(label_key, s) < 1.0 / (1.0 + std::exp(-logit)) ? 1 : 0;
}

std::string ClickSource::describe() const {
  return fmt::format("synthetic clicks ({} tables x {} rows, bags of {}, Zipf {}, {} dense features)", tables_, rows_,
                     bag_, zipf_, features_);
}

int64_t click_record_bytes(const ModelConfig& model) {
  return 8 * (1 + model.dense_features + model.tables * model.bag_size);
}

ClickFile::ClickFile(const std::string& path, const ModelConfig& model)
    : ClickData(model), file_(path, "clicks file"), record_bytes_(click_record_bytes(model)) {
  const int64_t bytes = file_.size();
  LOOM_CHECK_INPUT(bytes > 0 && bytes % record_bytes_ == 0,
                   "clicks file '{}' is truncated: {} bytes is not a whole number of {}-byte records (label, {} "
                   "dense features, {} tables x {} ids); hint: check model.dense_features, model.tables and "
                   "model.bag_size",
                   path, bytes, record_bytes_, features_, tables_, bag_);
  records_ = bytes / record_bytes_;
  const int64_t chunk = std::max<int64_t>(1, DataFile::kScanChunk / record_bytes_);
  std::vector<unsigned char> buffer(static_cast<size_t>(std::min(chunk, records_) * record_bytes_));
  std::vector<int64_t> ids(static_cast<size_t>(tables_ * bag_));
  std::vector<double> dense(static_cast<size_t>(features_));
  for (int64_t first = 0; first < records_; first += chunk) {
    const int64_t n = std::min(chunk, records_ - first);
    file_.read(first * record_bytes_, n * record_bytes_, buffer.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = first + i;
      int64_t label = 0;
      decode(buffer.data() + i * record_bytes_, ids.data(), dense.data(), &label);
      std::string problem;
      if (label != 0 && label != 1) problem = fmt::format("label {} is not 0 or 1", label);
      for (size_t k = 0; k < ids.size() && problem.empty(); ++k)
        if (ids[k] < 0 || ids[k] >= rows_)
          problem = fmt::format("table {} has id {}, out of range for model.table_rows = {}",
                                static_cast<int64_t>(k) / bag_, ids[k], rows_);
      LOOM_CHECK_INPUT(problem.empty(), "clicks file '{}', record {}: {}; hint: check model.table_rows and model.tables",
                       path, r, problem);
    }
  }
}

void ClickFile::decode(const unsigned char* p, int64_t* ids, double* dense, int64_t* label) const {
  std::memcpy(label, p, 8);
  std::memcpy(dense, p + 8, static_cast<size_t>(8 * features_));
  std::memcpy(ids, p + 8 * (1 + features_), static_cast<size_t>(8 * tables_ * bag_));
}

void ClickFile::sample(int64_t s, int64_t* ids, double* dense, int64_t* label) const {
  std::vector<unsigned char> record(static_cast<size_t>(record_bytes_));
  file_.read((s % records_) * record_bytes_, record_bytes_, record.data());
  decode(record.data(), ids, dense, label);
}

std::string ClickFile::describe() const {
  return fmt::format("clicks file {} ({} records, {} tables x {} rows, bags of {})", file_.path(), records_, tables_, rows_,
                     bag_);
}

std::unique_ptr<ClickData> open_clicks(const Config& config) {
  const std::string& source = config.data.source;
  if (source.starts_with("clicks:")) return std::make_unique<ClickFile>(source.substr(7), config.model);
  return std::make_unique<ClickSource>(config.model, config.data.zipf, static_cast<uint64_t>(config.train.seed));
}

void write_clicks(const ClickData& data, int64_t count, const std::string& path) {
  OutputFile out(path);
  constexpr int64_t kChunk = ClickFile::kWriteChunk;
  std::string records;
  for (int64_t first = 0; first < count; first += kChunk) {
    const int64_t n = std::min(kChunk, count - first);
    const nn::MicroBatch mb = data.microbatch(kChunk, n, first / kChunk, 0);  // samples [first, first + n)
    const int64_t* labels = mb.targets.data_ptr<int64_t>();
    records.clear();
    for (int64_t r = 0; r < n; ++r) {
      const at::Tensor dense = mb.dense[r].contiguous(), ids = mb.tokens[r].contiguous();
      records.append(reinterpret_cast<const char*>(labels + r), 8);
      records.append(reinterpret_cast<const char*>(dense.data_ptr<double>()), static_cast<size_t>(8 * dense.numel()));
      records.append(reinterpret_cast<const char*>(ids.data_ptr<int64_t>()), static_cast<size_t>(8 * ids.numel()));
    }
    out.write(records);
  }
  out.commit();
}

}  // namespace loom::data

#include "loom/data/clicks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

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

ClickSource::ClickSource(const ModelConfig& model, double zipf, uint64_t seed)
    : tables_(model.tables), rows_(model.table_rows), bag_(model.bag_size), features_(model.dense_features),
      zipf_(zipf), seed_(seed) {
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

nn::MicroBatch ClickSource::microbatch(int64_t global_batch, int64_t micro_batch, int64_t step, int64_t index) const {
  const uint64_t ids_key = stream_key(seed_, "clicks.ids"), dense_key = stream_key(seed_, "clicks.dense");
  const uint64_t label_key = stream_key(seed_, "clicks.label"), row_weight = stream_key(seed_, "clicks.row_weight");
  const uint64_t feature_weight = stream_key(seed_, "clicks.feature_weight");
  const int64_t first = step * global_batch + index * micro_batch, width = tables_ * bag_;
  at::Tensor ids = at::empty({micro_batch, width}, at::kLong);
  at::Tensor dense = at::empty({micro_batch, features_}, at::kDouble);
  at::Tensor labels = at::empty({micro_batch}, at::kLong);
  int64_t* id = ids.data_ptr<int64_t>();
  double* x = dense.data_ptr<double>();
  for (int64_t i = 0; i < micro_batch; ++i) {
    const auto s = static_cast<uint64_t>(first + i);
    double logit = -0.5;
    for (int64_t f = 0; f < tables_; ++f) {
      for (int64_t l = 0; l < bag_; ++l) {
        const int64_t row =
            row_of(f, zipf_rank(ids_key, s * static_cast<uint64_t>(width) + static_cast<uint64_t>(f * bag_ + l)));
        id[i * width + f * bag_ + l] = row;
        logit += 0.8 * standard_normal(row_weight, static_cast<uint64_t>(f * rows_ + row)) / static_cast<double>(bag_);
      }
    }
    for (int64_t j = 0; j < features_; ++j) {
      const double v = standard_normal(dense_key, s * static_cast<uint64_t>(features_) + static_cast<uint64_t>(j));
      x[i * features_ + j] = v;
      logit += 0.5 * standard_normal(feature_weight, static_cast<uint64_t>(j)) * v;
    }
    labels.data_ptr<int64_t>()[i] = uniform01(label_key, s) < 1.0 / (1.0 + std::exp(-logit)) ? 1 : 0;
  }
  nn::MicroBatch mb;
  mb.tokens = ids;
  mb.dense = dense;
  mb.targets = labels;
  mb.loss_scale = 1.0 / static_cast<double>(global_batch);
  return mb;
}

std::string ClickSource::describe() const {
  return fmt::format("synthetic clicks ({} tables x {} rows, bags of {}, Zipf {}, {} dense features)", tables_, rows_,
                     bag_, zipf_, features_);
}

}  // namespace loom::data

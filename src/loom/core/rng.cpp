#include "loom/core/rng.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <numbers>

#include "loom/core/error.h"

namespace loom {

uint64_t stream_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a over the name, then mixed with the seed
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return mix64(mix64(seed) ^ h);
}

double uniform01(uint64_t key, uint64_t counter) {
  return static_cast<double>(mix64(key ^ mix64(counter)) >> 11) * 0x1.0p-53;
}

double standard_normal(uint64_t key, uint64_t counter) {
  const double u1 = 1.0 - uniform01(key, 2 * counter);  // (0, 1]: log is finite
  const double u2 = uniform01(key, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t uniform_int(uint64_t key, uint64_t counter, uint64_t n) {
  return static_cast<uint64_t>(uniform01(key, counter) * static_cast<double>(n)) % n;
}

at::Tensor normal_tensor(uint64_t key, const std::vector<int64_t>& full_shape, const Shard& shard,
                         double std, at::ScalarType dtype) {
  const int64_t rank = static_cast<int64_t>(full_shape.size());
  std::vector<int64_t> shape = full_shape;
  if (shard.dim >= 0) {
    LOOM_CHECK(shard.dim < rank && shard.start >= 0 && shard.length >= 0 &&
                   shard.start + shard.length <= full_shape[shard.dim],
               "shard (dim {}, start {}, length {}) is outside a tensor of rank {}", shard.dim,
               shard.start, shard.length, rank);
    shape[shard.dim] = shard.length;
  }
  // Elements of the shard map to full-tensor indices as: outer blocks x [start, start+len) x inner.
  const int64_t dim = shard.dim >= 0 ? shard.dim : 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= full_shape[d];
  for (int64_t d = dim + 1; d < rank; ++d) inner *= full_shape[d];
  const int64_t full_len = rank == 0 ? 1 : full_shape[dim];
  const int64_t start = shard.dim >= 0 ? shard.start : 0;
  const int64_t len = rank == 0 ? 1 : shape[dim];

  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kDouble));
  double* p = out.data_ptr<double>();
  const int64_t count = outer * len * inner;
  at::parallel_for(0, count, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t o = i / (len * inner), r = (i / inner) % len, c = i % inner;
      const auto global = static_cast<uint64_t>((o * full_len + start + r) * inner + c);
      p[i] = std * standard_normal(key, global);
    }
  });
  return out.to(dtype);
}

}  // namespace loom

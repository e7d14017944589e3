#pragma once
// Counter-based random numbers: a value is a pure function of (key, counter), so any element of
// any tensor can be produced on its own. This is what makes initialisation layout-independent:
// a shard of a parameter is generated directly from the global element indices it covers and
// equals the same slice of the serially initialised parameter, bit for bit.
#include <ATen/ATen.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace loom {

// A bijective 64-bit mixer (splitmix64's finaliser); consecutive inputs give unrelated outputs.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The key of one random stream, e.g. (seed, "blocks.3.attn.qkv.weight").
uint64_t stream_key(uint64_t seed, std::string_view name);

// Uniform in [0, 1) with 53 random bits.
double uniform01(uint64_t key, uint64_t counter);
// Standard normal (Box-Muller over counters 2c and 2c+1).
double standard_normal(uint64_t key, uint64_t counter);
// Uniform integer in [0, n).
uint64_t uniform_int(uint64_t key, uint64_t counter, uint64_t n);

// Which part of a full tensor a rank holds: `length` entries from `start` along `dim`
// (dim = -1: the whole tensor).
struct Shard {
  int64_t dim = -1;
  int64_t start = 0;
  int64_t length = 0;
  bool operator==(const Shard&) const = default;
};

// N(0, std^2) values of the elements `shard` selects from a tensor of `full_shape`; element e of
// the full tensor (row-major index) always draws counter e.
at::Tensor normal_tensor(uint64_t key, const std::vector<int64_t>& full_shape, const Shard& shard,
                         double std, at::ScalarType dtype);

}  // namespace loom

#pragma once
// The building blocks of input validation: each refuses a bad value with an InputError that
// names the key, the value and what was expected. Used by the config's common checks
// (core/config_validate.cpp) and by each model kind's own (models/).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// `value` must be one of `allowed` (listed in the error).
void check_one_of(std::string_view key, std::string_view value, std::span<const std::string_view> allowed);
void check_positive(std::string_view key, int64_t value);

// NOTE [Sizes that fit]
// Sizes multiply: the token table is vocab x d_model elements, a micro-batch's logits micro_batch x
// seq_len x vocab. Every such product must fit the int64 arithmetic of shapes and byte counts (up to
// 8 bytes an element), or later code computes with a wrapped number instead of refusing; 2^60 leaves
// that room. Whether the memory exists is the budget's and the allocator's question, not this one.
inline constexpr int64_t kMaxCount = int64_t{1} << 60;

struct Factor {
  std::string key;
  int64_t value;
};

// Refuses `what`, the product of positive `factors`, above `limit` (named `limit_text`).
void check_product(std::string_view what, const std::vector<Factor>& factors, int64_t limit = kMaxCount,
                   std::string_view limit_text = "2^60, what loom's 64-bit sizes and byte counts hold");

// Each weight of an MLP of hidden `sizes` (named `key`) over `input` features.
void check_mlp(std::string_view key, const std::vector<int64_t>& sizes, Factor input);

}  // namespace loom

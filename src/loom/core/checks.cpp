#include "loom/core/checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "loom/core/error.h"

namespace loom {

void check_one_of(std::string_view key, std::string_view value, std::span<const std::string_view> allowed) {
  LOOM_CHECK_INPUT(std::find(allowed.begin(), allowed.end(), value) != allowed.end(),
                   "{} = \"{}\" is not one of: {}", key, value, fmt::join(allowed, ", "));
}

void check_positive(std::string_view key, int64_t value) {
  LOOM_CHECK_INPUT(value > 0, "{} = {} must be positive", key, value);
}

void check_product(std::string_view what, const std::vector<Factor>& factors, int64_t limit,
                   std::string_view limit_text) {
  int64_t product = 1;
  bool overflow = false;
  for (const auto& f : factors) overflow = overflow || __builtin_mul_overflow(product, f.value, &product);
  if (!overflow && product <= limit) return;
  std::vector<std::string> terms;
  for (const auto& f : factors) terms.push_back(fmt::format("{} {}", f.key, f.value));
  throw InputError(fmt::format("{} ({}) comes to {}; the limit is {}; hint: make one of these smaller", what,
                               fmt::join(terms, " x "), overflow ? "more than 2^63" : fmt::format("{}", product),
                               limit_text));
}

void check_mlp(std::string_view key, const std::vector<int64_t>& sizes, Factor input) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Factor out{fmt::format("{}[{}]", key, i), sizes[i]};
    check_product(fmt::format("the weight of {}", out.key), {input, out});
    input = out;
  }
}

}  // namespace loom

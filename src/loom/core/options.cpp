#include "loom/core/options.h"

#include <fmt/format.h>

#include "loom/core/error.h"

namespace loom {

std::string option_list(const std::string_view* names, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += fmt::format("{}{}", i == 0 ? "" : ", ", names[i]);
  return out;
}

size_t option_index(std::string_view key, std::string_view text, const std::string_view* names, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (names[i] == text) return i;
  throw InputError(fmt::format("{}{}\"{}\" is not one of: {}", key, key.empty() ? "" : " = ", text,
                               option_list(names, count)));
}

}  // namespace loom

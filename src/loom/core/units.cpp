#include "loom/core/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "loom/core/error.h"

namespace loom {

int64_t parse_bytes(std::string_view text, std::string_view what) {
  static constexpr std::array<std::pair<std::string_view, double>, 10> kUnits{{
      {"B", 1.0},
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"", 1.0},
  }};
  const std::string s(text);
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  std::string_view unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.remove_prefix(1);
  const bool parsed_number = end != s.c_str() && std::isfinite(value) && value >= 0;
  for (const auto& [name, scale] : kUnits) {
    if (parsed_number && unit == name) return static_cast<int64_t>(std::llround(value * scale));
  }
  throw InputError(fmt::format(
      "{} = \"{}\" is not a byte size; write a number with an optional unit, e.g. \"2GiB\", "
      "\"512MiB\", \"1.5GB\"",
      what, text));
}

std::string format_bytes(double bytes) {
  static constexpr std::array<const char*, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  size_t i = 0;
  while (std::abs(bytes) >= 1024.0 && i + 1 < kNames.size()) {
    bytes /= 1024.0;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, kNames[i]);
}

}  // namespace loom

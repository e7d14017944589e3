#include "loom/core/units.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "loom/core/error.h"

namespace loom {

namespace {

struct ByteUnit {
  std::string_view name;
  double scale;
};
constexpr std::array<ByteUnit, 10> kByteUnits{{
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

}  // namespace

int64_t parse_bytes(std::string_view text, std::string_view what) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(s.c_str(), &end);
  const bool overflow = errno == ERANGE && std::isinf(value);
  std::string_view unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.remove_prefix(1);
  const auto* match =
      std::find_if(kByteUnits.begin(), kByteUnits.end(), [&](const ByteUnit& u) { return u.name == unit; });
  LOOM_CHECK_INPUT(end != s.c_str() && match != kByteUnits.end(),
                   "{} = \"{}\" is not a byte size; write a number with an optional unit (B, KiB, MiB, GiB, TiB, KB, "
                   "MB, GB, TB), e.g. \"2GiB\", \"512MiB\", \"1.5GB\"",
                   what, text);
  LOOM_CHECK_INPUT(!std::isnan(value), "{} = \"{}\" is not a number of bytes; write e.g. \"2GiB\"", what, text);
  LOOM_CHECK_INPUT(!std::signbit(value) || value == 0,
                   "{} = \"{}\" is negative; a byte size is 0 or more, e.g. \"2GiB\"", what, text);
  LOOM_CHECK_INPUT(overflow || !std::isinf(value),
                   "{} = \"{}\" is infinite; a byte size must be finite, e.g. \"2GiB\"", what, text);
  // 2^63 bytes (8 EiB) is the first size an int64 cannot hold; the product is exact for powers of 2.
  const double bytes = value * match->scale;
  LOOM_CHECK_INPUT(!overflow && bytes < 0x1p63,
                   "{} = \"{}\" is too large: a byte size must be below 8 EiB (2^63 bytes), e.g. \"2GiB\"", what,
                   text);
  return static_cast<int64_t>(std::llround(bytes));
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

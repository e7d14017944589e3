#pragma once
// This machine's name, as messages and measured files name it.
#include <unistd.h>

#include <array>
#include <string>

namespace loom {

// gethostname's answer, or `fallback` where it gives none.
inline std::string host_name(const char* fallback) {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return fallback;
  return name.data();
}

}  // namespace loom

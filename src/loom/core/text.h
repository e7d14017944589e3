#pragma once
// Small questions about text that readers of user files ask.
#include <string_view>

namespace loom {

// Whether `line` holds nothing but spaces, tabs and line ends (a blank line of a file, an empty value).
inline bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace loom

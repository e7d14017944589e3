#pragma once
// The instruction-set flags of this machine's CPU, as /proc/cpuinfo's "flags" line names them.
#include <set>
#include <string>
#include <string_view>

namespace loom {

// The words of the first "flags" line of a /proc/cpuinfo text (empty when there is none).
std::set<std::string> cpu_flags_in(std::string_view cpuinfo);
// This machine's (empty where /proc/cpuinfo cannot be read).
std::set<std::string> cpu_flags();

}  // namespace loom

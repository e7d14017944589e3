#include "loom/core/cpu_flags.h"

#include <fstream>
#include <sstream>

namespace loom {

std::set<std::string> cpu_flags_in(std::string_view cpuinfo) {
  std::istringstream lines{std::string(cpuinfo)};
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("flags")) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

std::set<std::string> cpu_flags() {
  std::ifstream file("/proc/cpuinfo");
  std::ostringstream text;
  text << file.rdbuf();
  return cpu_flags_in(text.str());
}

}  // namespace loom

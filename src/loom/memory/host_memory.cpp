#include "loom/memory/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace loom::memory {
namespace {

// A limit file's number; 0 when absent or "max" (no limit).
int64_t read_limit(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    return std::stoll(text);
  } catch (...) {
    return 0;
  }
}

}  // namespace

int64_t host_memory_bytes() {
  const int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  int64_t bytes = physical;
  // cgroup v2, then v1 (whose "no limit" is a huge number, which the min ignores).
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const int64_t limit = read_limit(path);
    if (limit > 0) bytes = std::min(bytes, limit);
  }
  return bytes;
}

}  // namespace loom::memory

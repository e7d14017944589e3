#include "loom/core/install_dirs.h"

#include <dlfcn.h>

namespace loom {

std::filesystem::path code_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&code_dir), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path() : file.parent_path();
}

}  // namespace loom

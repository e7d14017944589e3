#include "loom/core/blas_kernel.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <strings.h>

#include "loom/core/cpu_flags.h"

namespace loom {
namespace {

// The kernel to ask for on this CPU, or nullptr when OpenBLAS's own choice stands.
const char* better_kernel(const char* chosen) {
  if (chosen == nullptr || strcasecmp(chosen, "Prescott") != 0) return nullptr;  // a kernel it picked on purpose
  const std::set<std::string> flags = cpu_flags();
  auto has = [&](const char* f) { return flags.count(f) > 0; };
  if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq")) return "SkylakeX";
  if (has("avx2") && has("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

void select_blas_kernel(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice (or ours, after the exec)
  if (const char* off = std::getenv("LOOM_BLAS_AUTO"); off != nullptr && std::string(off) == "0") return;
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return;  // not OpenBLAS
  const char* kernel = better_kernel(core_name());
  if (kernel == nullptr) return;
  setenv("OPENBLAS_CORETYPE", kernel, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: keep running with the generic kernel
}

}  // namespace loom

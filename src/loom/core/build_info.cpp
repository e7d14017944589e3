#include "loom/core/build_info.h"

#include <ATen/Version.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <string_view>

#include "loom/version.h"

namespace loom {
namespace {

// KEY's value in libtorch's build configuration ("..., KEY=VALUE, ..."), "" when absent.
std::string config_value(std::string_view config, std::string_view key) {
  const std::string needle = fmt::format("{}=", key);
  for (size_t at = config.find(needle); at != std::string_view::npos; at = config.find(needle, at + 1)) {
    if (at > 0 && config[at - 1] != ' ' && config[at - 1] != ',') continue;  // "CUDA_VERSION" inside another key
    const size_t begin = at + needle.size();
    const size_t end = config.find_first_of(", \n", begin);
    return std::string(config.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
  }
  return "";
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

}  // namespace

BuildInfo build_info() {
  const std::string config = at::show_config();
  BuildInfo b{.loom = kVersion, .torch_built = TORCH_VERSION};
  b.torch_running = config_value(config, "TORCH_VERSION");
  b.torch_cuda = config_value(config, "CUDA_VERSION");
  b.torch_blas = config_value(config, "BLAS_INFO");
#ifdef LOOM_CUDA_VERSION
  b.cuda = LOOM_CUDA_VERSION;
#endif
#ifdef LOOM_WITH_NCCL
  b.nccl = true;  // the NCCL backend is compiled in (whether libnccl loads is asked at run time)
#endif
#if defined(LOOM_WITH_MPI) && !LOOM_WITH_MPI
  b.mpi = false;  // LOOM_MPI=OFF
#endif
  return b;
}

std::string version_text(const BuildInfo& b) {
  std::string running = b.torch_running.empty() ? "unknown" : b.torch_running;
  if (b.torch_running != b.torch_built) running += fmt::format(", compiled against {}", b.torch_built);
  return fmt::format(
      "loom {}\n"
      "libtorch {} (BLAS {}, {})\n"
      "built in: CUDA {}, NCCL {}, MPI {}",
      b.loom, running, b.torch_blas.empty() ? "unknown" : b.torch_blas,
      b.torch_cuda.empty() ? "CPU only" : fmt::format("CUDA {}", b.torch_cuda),
      b.cuda.empty() ? "no" : b.cuda, yes_no(b.nccl), yes_no(b.mpi));
}

std::string build_line(const BuildInfo& b) {
  return fmt::format("loom {} on libtorch {}{} ({}); built in: CUDA {}, NCCL {}, MPI {}", b.loom, b.torch_running,
                     b.torch_running == b.torch_built ? "" : fmt::format(" (compiled against {})", b.torch_built),
                     b.torch_blas, b.cuda.empty() ? "no" : b.cuda, yes_no(b.nccl), yes_no(b.mpi));
}

}  // namespace loom

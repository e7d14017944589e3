#pragma once
// What this loom was built from and runs on: its version, the libtorch it was compiled against and
// the one it loaded, and which backends are compiled in. `loom --version` prints it whole; a run's
// header names it in one line (train/run_header.cpp), so a log says what produced it.
#include <string>

namespace loom {

struct BuildInfo {
  std::string loom;           // kVersion
  std::string torch_built;    // libtorch's version in the headers loom was compiled with
  std::string torch_running;  // the loaded libtorch's own (its build configuration's TORCH_VERSION)
  std::string torch_cuda;     // the CUDA version the loaded libtorch was built with; "" for a CPU build
  std::string torch_blas;     // the BLAS behind the loaded libtorch's GEMMs (mkl, openblas, ...)
  std::string cuda;           // loom's own CUDA sources (LOOM_CUDA): the toolkit's version, "" when off
  bool nccl = false;          // the NCCL backend
  bool mpi = true;            // the MPI backend (LOOM_MPI; OFF: one process)
};

BuildInfo build_info();
std::string version_text(const BuildInfo& b);  // `loom --version`: three lines (no final newline), the first "loom X.Y.Z"
std::string build_line(const BuildInfo& b);    // one line: "libtorch 2.15.0 (mkl), CUDA no, NCCL no, MPI yes"

}  // namespace loom

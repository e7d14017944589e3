#include "loom/nccl/library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>

#include "loom/core/error.h"

namespace loom::nccl {
namespace {

// The wheel's NCCL beside its torch (site-packages/nvidia/nccl/lib), else the loader's search.
void* open_library(std::string& tried) {
  const std::filesystem::path wheel =
      std::filesystem::path(LOOM_TORCH_LIBRARY_DIR).parent_path().parent_path() / "nvidia/nccl/lib/libnccl.so.2";
  for (const std::string& path : {wheel.string(), std::string("libnccl.so.2")}) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
    const char* why = dlerror();
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", path, why ? why : "does not load");
  }
  return nullptr;
}

template <class F>
void find(void* handle, const char* name, F*& out, std::string& missing) {
  out = reinterpret_cast<F*>(dlsym(handle, name));
  if (out == nullptr && missing.empty()) missing = fmt::format("libnccl has no {}", name);
}

}  // namespace

Library load_library() {
  Library l;
  std::string tried;
  void* h = open_library(tried);
  if (h == nullptr) {
    l.missing = "libnccl does not load (" + tried + ")";
    return l;
  }
  find(h, "ncclGetUniqueId", l.get_unique_id, l.missing);
  find(h, "ncclCommInitRank", l.comm_init_rank, l.missing);
  find(h, "ncclCommSplit", l.comm_split, l.missing);
  find(h, "ncclCommDestroy", l.comm_destroy, l.missing);
  find(h, "ncclCommAbort", l.comm_abort, l.missing);
  find(h, "ncclCommGetAsyncError", l.comm_get_async_error, l.missing);
  find(h, "ncclGetErrorString", l.get_error_string, l.missing);
  find(h, "ncclAllReduce", l.all_reduce, l.missing);
  find(h, "ncclReduceScatter", l.reduce_scatter, l.missing);
  find(h, "ncclAllGather", l.all_gather, l.missing);
  find(h, "ncclBroadcast", l.broadcast, l.missing);
  find(h, "ncclSend", l.send, l.missing);
  find(h, "ncclRecv", l.recv, l.missing);
  find(h, "ncclGroupStart", l.group_start, l.missing);
  find(h, "ncclGroupEnd", l.group_end, l.missing);
  return l;
}

void Library::check(ncclResult_t rc, const std::string& what) const {
  if (rc != ncclSuccess) throw Error(fmt::format("NCCL: {} failed: {}", what, get_error_string(rc)));
}

}  // namespace loom::nccl

#include "loom/cuda/placement.h"

#include <fmt/format.h>

#include "loom/core/build_info.h"
#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/cuda/device_memory.h"

namespace loom::cuda {
namespace {

// parallel.backend = "nccl" on this rank's device and node: InputError when it cannot run.
void check_nccl(const Config& config, TrainDevice device, const NodeView& node) {
  const Devices& d = node.devices;
  LOOM_CHECK_INPUT(device == TrainDevice::Cuda,
                   "parallel.backend = \"nccl\" carries GPU tensors, but train.device = \"{}\" trains on the CPU "
                   "here ({}); hint: parallel.backend = \"mpi\" (or \"auto\")",
                   config.train.device.name(), d.why_none);
  LOOM_CHECK_INPUT(node.nccl_missing.empty(),
                   "parallel.backend = \"nccl\", but NCCL cannot run here: {}; hint: parallel.backend = \"mpi\" (GPU "
                   "tensors through host buffers) or \"auto\"",
                   node.nccl_missing);
  LOOM_CHECK_INPUT(node.local_ranks <= d.count,
                   "parallel.backend = \"nccl\" needs a GPU per rank, but {} ranks of the job run on this node and "
                   "it shows {} GPU{} (CUDA_VISIBLE_DEVICES chooses which); hint: start at most {} rank{} per node, "
                   "or parallel.backend = \"mpi\" (ranks share a GPU through host buffers)",
                   node.local_ranks, d.count, d.count == 1 ? "" : "s", d.count, d.count == 1 ? "" : "s");
}

}  // namespace

Placement place_rank(const Config& config, const NodeView& node) {
  const TrainDevice asked = config.train.device;
  const int gpus = node.devices.count;
  LOOM_CHECK_INPUT(asked != TrainDevice::Cuda || gpus > 0,
                   "train.device = \"cuda\", but this rank has no GPU to train on: {}; hint: train.device = \"cpu\", "
                   "or \"auto\" (a GPU where one is usable, else the CPU)",
                   node.devices.why_none);
  Placement p;
  p.device = asked == TrainDevice::Cuda || (asked == TrainDevice::Auto && gpus > 0) ? TrainDevice::Cuda
                                                                                     : TrainDevice::Cpu;
  const Backend backend = config.parallel.backend;
  if (backend == Backend::Nccl) check_nccl(config, p.device, node);
  const bool nccl_runs = p.device == TrainDevice::Cuda && node.nccl_missing.empty() && node.local_ranks <= gpus;
  p.backend = backend == Backend::Nccl || (backend == Backend::Auto && nccl_runs) ? Backend::Nccl : Backend::Mpi;
  if (p.device == TrainDevice::Cuda) p.gpu = node.local_rank % gpus;
  return p;
}

Placement place_this_rank(const Config& config, int local_rank, int local_ranks,
                          const std::function<std::string()>& nccl_missing) {
  NodeView node;
  node.local_rank = local_rank, node.local_ranks = local_ranks;
  if (config.train.device != TrainDevice::Cpu) {
    node.devices = devices();
    if (node.devices.count > 0) node.nccl_missing = nccl_missing();
  }
  return place_rank(config, node);
}

void check_trainable(const Config& config, const Placement& placement) {
  if (placement.device == TrainDevice::Cpu) return;
  const std::string where = fmt::format("train.device = \"{}\" places this rank on cuda:{}", config.train.device.name(),
                                        placement.gpu);
  LOOM_CHECK_INPUT(config.parallel.sparse != SparseMode::On,
                   "parallel.sparse = \"on\", but {}, and the sparse path's row exchange runs on the host only so "
                   "far; hint: parallel.sparse = \"auto\" (dense tables on a GPU) or \"off\"",
                   where);
  LOOM_CHECK_INPUT(config.train.table_update == TableUpdate::Dense,
                   "train.table_update = \"{}\", but {}, and lazy table rows are found on the host only so far; "
                   "hint: train.table_update = \"dense\"",
                   config.train.table_update.name(), where);
  const std::string why = load_torch_cuda();
  LOOM_CHECK_INPUT(why.empty(), "{}, but libtorch's CUDA library does not load: {}; hint: train.device = \"cpu\"",
                   where, why);
  const int64_t budget = config.budget_bytes(), gpu_bytes = device_total_bytes(placement.gpu);
  LOOM_CHECK_INPUT(budget <= gpu_bytes,
                   "memory.budget = \"{}\" is more than the {} of memory of the GPU {} ({}); hint: a budget of at "
                   "most the GPU's memory, or none",
                   config.memory.budget, format_bytes(static_cast<double>(gpu_bytes)), placement.gpu, where);
}

}  // namespace loom::cuda

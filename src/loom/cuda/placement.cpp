#include "loom/cuda/placement.h"

#include <fmt/format.h>

#include "loom/core/build_info.h"
#include "loom/core/error.h"

namespace loom::cuda {
namespace {

// parallel.backend = "nccl" on this rank's device and node: InputError when it cannot run.
void check_nccl(const Config& config, TrainDevice device, const NodeView& node) {
  const Devices& d = node.devices;
  LOOM_CHECK_INPUT(device == TrainDevice::Cuda,
                   "parallel.backend = \"nccl\" carries GPU tensors, but train.device = \"{}\" trains on the CPU "
                   "here ({}); hint: parallel.backend = \"mpi\" (or \"auto\")",
                   config.train.device.name(), d.why_none);
  LOOM_CHECK_INPUT(node.nccl_built,
                   "parallel.backend = \"nccl\", but this loom was built without NCCL; hint: parallel.backend = "
                   "\"mpi\" (GPU tensors through host buffers) or \"auto\"");
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
  const bool nccl_runs = p.device == TrainDevice::Cuda && node.nccl_built && node.local_ranks <= gpus;
  p.backend = backend == Backend::Nccl || (backend == Backend::Auto && nccl_runs) ? Backend::Nccl : Backend::Mpi;
  if (p.device == TrainDevice::Cuda) p.gpu = node.local_rank % gpus;
  return p;
}

Placement place_this_rank(const Config& config, int local_rank, int local_ranks) {
  NodeView node;
  node.local_rank = local_rank, node.local_ranks = local_ranks, node.nccl_built = build_info().nccl;
  if (config.train.device != TrainDevice::Cpu) node.devices = devices();
  return place_rank(config, node);
}

void check_trainable(const Config& config, const Placement& placement) {
  LOOM_CHECK_INPUT(placement.device == TrainDevice::Cpu,
                   "train.device = \"{}\" places this rank on a GPU (cuda:{}), but this loom trains on the CPU "
                   "only: the GPU path (device tensors, the NCCL backend) is not built yet; hint: train.device = "
                   "\"cpu\"",
                   config.train.device.name(), placement.gpu);
}

}  // namespace loom::cuda

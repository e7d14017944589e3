#pragma once
// NOTE [Devices]
// A rank owns one device: the CPU, or the GPU its local rank picks (local rank modulo the GPUs
// CUDA_VISIBLE_DEVICES shows: with MPI, ranks may share a GPU through host buffers; NCCL needs a
// GPU per rank). train.device and parallel.backend are resolved here, per rank, from what this
// build has and what this node shows, before anything is allocated; a choice that cannot run is
// an InputError that names the keys, the values and what the node has. Every rank resolves
// before the ranks agree on their input (dist/input_agreement.h), so one rank's refusal ends all.
// The trainer then makes every tensor of a step on the rank's device (Placement::torch_device);
// the parameters are drawn on the host and copied, so their values do not depend on the device
// (docs/design.md, Devices).

#include <c10/core/Device.h>

#include <functional>
#include <string>

#include "loom/core/config.h"
#include "loom/cuda/devices.h"

namespace loom::cuda {

struct Placement {
  TrainDevice device = TrainDevice::Cpu;  // Cpu or Cuda, never Auto
  int gpu = -1;                           // the GPU's index among the visible ones (Cuda only)
  Backend backend = Backend::Mpi;         // Mpi or Nccl, never Auto
  bool operator==(const Placement&) const = default;
  // Where this rank's tensors live: the CPU, or cuda:<gpu>.
  c10::Device torch_device() const {
    return device == TrainDevice::Cuda ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(gpu))
                                       : c10::Device(c10::DeviceType::CPU);
  }
};

// What this node and build offer a rank: its index among the job's ranks on this node and their
// count, the GPUs it sees, and whether NCCL is compiled in.
struct NodeView {
  int local_rank = 0;
  int local_ranks = 1;
  Devices devices;
  std::string nccl_missing = "no NCCL backend";  // why NCCL cannot run here ("" when it can)
};

// train.device and parallel.backend resolved for one rank (InputError when they cannot run).
Placement place_rank(const Config& config, const NodeView& node);

// place_rank on this process's node; `nccl_missing` says why NCCL cannot run here ("" when it can:
// the DeviceBackend's missing()). The GPUs and NCCL are asked about only when train.device is not
// "cpu": asking starts the CUDA driver and loads libnccl, which a CPU rank never pays for.
Placement place_this_rank(const Config& config, int local_rank, int local_ranks,
                          const std::function<std::string()>& nccl_missing);

// What a GPU rank cannot run, from the config alone (InputError naming the key): embedding tables
// on the sparse path (parallel.sparse = "on"; "auto" keeps them dense on a GPU), lazy table rows,
// and a memory.budget past the GPU's memory. Also loads libtorch's CUDA library for a GPU rank. A
// run never trains on the CPU while its config says "cuda".
void check_trainable(const Config& config, const Placement& placement);

}  // namespace loom::cuda

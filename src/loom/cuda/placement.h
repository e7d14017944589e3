#pragma once
// NOTE [Devices]
// A rank owns one device: the CPU, or the GPU its local rank picks (local rank modulo the GPUs
// CUDA_VISIBLE_DEVICES shows: with MPI, ranks may share a GPU through host buffers; NCCL needs a
// GPU per rank). train.device and parallel.backend are resolved here, per rank, from what this
// build has and what this node shows, before anything is allocated; a choice that cannot run is
// an InputError that names the keys, the values and what the node has. Every rank resolves
// before the ranks agree on their input (dist/input_agreement.h), so one rank's refusal ends all.

#include "loom/core/config.h"
#include "loom/cuda/devices.h"

namespace loom::cuda {

struct Placement {
  TrainDevice device = TrainDevice::Cpu;  // Cpu or Cuda, never Auto
  int gpu = -1;                           // the GPU's index among the visible ones (Cuda only)
  Backend backend = Backend::Mpi;         // Mpi or Nccl, never Auto
  bool operator==(const Placement&) const = default;
};

// What this node and build offer a rank: its index among the job's ranks on this node and their
// count, the GPUs it sees, and whether NCCL is compiled in.
struct NodeView {
  int local_rank = 0;
  int local_ranks = 1;
  Devices devices;
  bool nccl_built = false;
};

// train.device and parallel.backend resolved for one rank (InputError when they cannot run).
Placement place_rank(const Config& config, const NodeView& node);

// place_rank on this process's node. The GPUs are asked for only when train.device is not "cpu":
// asking starts the CUDA driver, which a CPU rank never pays for.
Placement place_this_rank(const Config& config, int local_rank, int local_ranks);

// This build trains on the CPU only (the GPU path is issue 36's next step): InputError for a
// placement on a GPU, so that a run never trains on the CPU while its config says "cuda".
void check_trainable(const Config& config, const Placement& placement);

}  // namespace loom::cuda

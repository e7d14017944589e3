#pragma once
// What a rank's device changes outside the trainer's own members (NOTE [Devices]): the
// communicator its tensors cross, the memory it has, and waiting for its work. Used by the trainer and `loom profile`.
#include <memory>
#include <string_view>

#include "loom/cuda/placement.h"
#include "loom/dist/communicator.h"
#include "loom/dist/device_backend.h"
#include "loom/plan/run_plan.h"

namespace loom::train {

// The communicator device tensors cross, collective over `world`: null where `world` carries them
// itself (CPU ranks); the backend's when every rank resolved to it (NCCL), else `world` through host
// buffers (NOTE [Host staging]), and then placement.backend becomes Mpi. Ranks placed on different
// kinds of device (train.device = `device_key` resolved differently on their nodes) are refused
// with an AgreedError, exit 2, on every rank.
std::unique_ptr<dist::Communicator> connect_devices(dist::Communicator& world, cuda::Placement& placement,
                                                    const dist::DeviceBackend* devices, std::string_view device_key);

// The memory a rank's tensors live in, which its plan must fit without a budget: this machine's
// shared by its `local_ranks`, or the placement's GPU's shared by the local ranks placed on it
// (local rank modulo the GPUs, NOTE [Devices]).
plan::RankMemory rank_memory(const cuda::Placement& placement, int local_ranks);

// Waits until the work queued on the placement's device has run (nothing to wait for on the CPU).
void wait_for_device(const cuda::Placement& placement);

}  // namespace loom::train

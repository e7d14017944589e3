#pragma once
// What a rank's device changes outside the trainer's own members (NOTE [Devices]): the
// communicator its tensors cross, and waiting for its work. Used by the trainer and `loom profile`.
#include <memory>
#include <string_view>

#include "loom/cuda/placement.h"
#include "loom/dist/communicator.h"
#include "loom/dist/device_backend.h"

namespace loom::train {

// The communicator device tensors cross, collective over `world`: null where `world` carries them
// itself (CPU ranks); the backend's when every rank resolved to it (NCCL), else `world` through host
// buffers (NOTE [Host staging]), and then placement.backend becomes Mpi. Ranks placed on different
// kinds of device (train.device = `device_key` resolved differently on their nodes) are refused
// with an AgreedError, exit 2, on every rank.
std::unique_ptr<dist::Communicator> connect_devices(dist::Communicator& world, cuda::Placement& placement,
                                                    const dist::DeviceBackend* devices, std::string_view device_key);

// Waits until the work queued on the placement's device has run (nothing to wait for on the CPU).
void wait_for_device(const cuda::Placement& placement);

}  // namespace loom::train

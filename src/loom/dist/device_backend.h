#pragma once
// A communicator backend for device tensors (NCCL: nccl/), handed to the trainer by the program
// that links it, as the MPI backend hands it the world: the trainer knows only the interfaces of
// dist/ (NOTE [Devices], NOTE [NCCL backend]).
#include <memory>
#include <string>

#include "loom/dist/communicator.h"

namespace loom::dist {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Why this backend cannot run in this process ("" when it can): its library missing, say.
  virtual std::string missing() const = 0;
  // Collective over `host` (the ranks' host communicator, which must outlive the result): a
  // communicator of the same ranks for tensors on GPU `gpu`. Host tensors given to it travel on
  // `host`.
  virtual std::unique_ptr<Communicator> connect(Communicator& host, int gpu) const = 0;
};

// Why `backend` cannot run in this process: its missing(), or that there is none (null).
inline std::string backend_missing(const DeviceBackend* backend) {
  return backend != nullptr ? backend->missing() : "the program gave no backend for GPU tensors";
}

}  // namespace loom::dist

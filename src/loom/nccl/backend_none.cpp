// The NCCL backend of a build without CUDA: it says why it cannot run (NOTE [NCCL backend]).
#include "loom/core/error.h"
#include "loom/nccl/backend.h"

namespace loom::nccl {
namespace {

class NoBackend final : public dist::DeviceBackend {
 public:
  std::string missing() const override { return "loom was built without it (no CUDA, or no nccl.h)"; }
  std::unique_ptr<dist::Communicator> connect(dist::Communicator&, int) const override {
    throw Error("the NCCL backend: " + missing());
  }
};

}  // namespace

std::unique_ptr<dist::DeviceBackend> make_backend(double) { return std::make_unique<NoBackend>(); }

}  // namespace loom::nccl

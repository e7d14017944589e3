#pragma once
// NOTE [NCCL backend]
// GPU tensors' collectives on NCCL, behind the Communicator interface (dist/communicator.h):
//   - bootstrap: rank 0 of the host communicator (MPI) makes NCCL's unique id and broadcasts it;
//     every rank then joins the NCCL communicator on its GPU. A split is NCCL's split beside the
//     host communicator's, so each NCCL communicator has a host twin of the same ranks;
//   - streams: each communicator enqueues on a stream of its own, after an event recorded on the
//     compute stream (libtorch's default stream, which loom never changes), and records a done
//     event after it: the compute stream's earlier kernels finish before the collective reads,
//     and the compute that follows may overlap it until wait(), which is how the bucketed
//     all-reduce and the tensor-parallel overlap keep overlapping;
//   - all-to-all(v) is NCCL's grouped sends and receives, one pair per peer;
//   - send / recv keep their tags: NCCL matches a pair's messages in posting order, not by tag,
//     so the pipeline's messages cross on the host twin through host buffers (NOTE [Host
//     staging]) until their posting order is shown to agree on both sides;
//   - host tensors (the trainer's norms and votes) travel on the host twin;
//   - timeouts: wait() polls the done event and NCCL's asynchronous error; past the
//     communicator's timeout, or on an error, it aborts the NCCL communicator and throws, so a dead
//     peer ends the run (the runtime's failure path ends the other ranks) instead of hanging it.
// libnccl is loaded on demand (nccl/library.h): a CPU run never loads it.
#include <memory>

#include "loom/dist/device_backend.h"

namespace loom::nccl {

// The NCCL backend of this build, whose operations time out after `timeout_s`: libnccl is loaded
// when a GPU rank first asks for it. Where loom is built without NCCL, one whose missing() says so.
std::unique_ptr<dist::DeviceBackend> make_backend(double timeout_s);

}  // namespace loom::nccl

#pragma once
// NOTE [Sub-pipelined TP] (Merak, parallel.tp_overlap = k): a tensor-parallel block cuts its
// micro-batch into k chunks along the batch dim. As soon as a chunk's partial result (the
// row-parallel output in forward, the column-parallel input gradient in backward) is computed,
// its all-reduce over tp starts, non-blocking, and the next chunk computes while it travels;
// pending reductions are driven between chunks (MPI progresses only inside MPI calls). The sums
// are the same as one all-reduce of the whole tensor, chunk by chunk, so the model is unchanged.
#include <vector>

#include "loom/core/error.h"
#include "loom/dist/communicator.h"

namespace loom::parallel {

class ChunkedAllReduce {
 public:
  explicit ChunkedAllReduce(dist::Communicator& tp) : tp_(tp) {}
  // `chunk` must be a contiguous view that stays untouched until finish().
  void start(at::Tensor chunk);
  void finish();

 private:
  dist::Communicator& tp_;
  std::vector<dist::WorkPtr> pending_;
};

// The [begin, length) batch rows of chunk c when `batch` rows are cut into `chunks` equal parts;
// `chunks` must divide `batch` (the config check parallel.tp_overlap | train.micro_batch).
inline std::pair<int64_t, int64_t> chunk_rows(int64_t batch, int64_t chunks, int64_t c) {
  LOOM_CHECK(batch % chunks == 0, "[tp] a batch of {} rows does not cut into {} equal tp_overlap chunks", batch,
             chunks);
  const int64_t length = batch / chunks;
  return {c * length, length};
}

}  // namespace loom::parallel

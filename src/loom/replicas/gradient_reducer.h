#pragma once
// Data-parallel gradient all-reduce in buckets. The flat gradient is cut into contiguous buckets
// of about `bucket_mb` MiB at parameter boundaries; during the backward of a step's last local
// micro-batch, `layer_done(l)` is called after layer l's weight gradient is final, and each
// bucket's all-reduce (sum over the dp group) starts as soon as its last layer is done, while
// the backward of earlier layers goes on. `finish` waits for all of them.
//
// With a narrower `wire` type (parallel.grad_dtype = "bfloat16") each bucket is rounded to it,
// summed in it (half the bytes) and widened back into the float32 buffer when it completes.
//
// Sum, not average: every micro-batch's loss is already scaled by 1 / (global batch tokens), so
// the sum over ranks is the gradient of the global mean.
#include <optional>
#include <vector>

#include "loom/dist/communicator.h"
#include "loom/replicas/flat_params.h"

namespace loom::replicas {

class GradientReducer {
 public:
  GradientReducer(FlatParams& flat, dist::Communicator& group, double bucket_mb,
                  std::optional<at::ScalarType> wire = std::nullopt);

  void layer_done(size_t layer);
  void finish();

 private:
  struct Bucket {
    int64_t offset = 0, numel = 0;
    std::vector<size_t> layers;  // chain layers with parameters in this bucket
    size_t pending = 0;          // layers not done yet in this step
    dist::WorkPtr work;
    at::Tensor narrow;  // the bucket in the wire type while in flight (a narrower wire)
  };
  void start(Bucket& b);
  void complete(Bucket& b);
  FlatParams& flat_;
  dist::Communicator& group_;
  std::vector<Bucket> buckets_;
  at::ScalarType wire_;
};

}  // namespace loom::replicas

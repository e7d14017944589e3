#include "loom/data/sampler.h"

#include <vector>

namespace loom::data {

nn::MicroBatch make_microbatch(const TokenSource& source, const BatchShape& shape, int64_t step,
                               int64_t microbatch_index) {
  const int64_t b = shape.micro_batch, t = shape.seq_len;
  const int64_t first = step * shape.global_batch + microbatch_index * b;
  at::Tensor windows = at::empty({b, t + 1}, at::TensorOptions().dtype(at::kLong));
  int64_t* p = windows.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r) source.window(first + r, t + 1, p + r * (t + 1));
  nn::MicroBatch mb;
  mb.tokens = windows.narrow(1, 0, t).contiguous();
  mb.targets = windows.narrow(1, 1, t).contiguous();
  mb.loss_scale = 1.0 / static_cast<double>(shape.global_batch * t);
  return mb;
}

}  // namespace loom::data

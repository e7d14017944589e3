#include "loom/replicas/gradient_reducer.h"

#include <algorithm>

namespace loom::replicas {

GradientReducer::GradientReducer(FlatParams& flat, dist::Communicator& group, double bucket_mb,
                                 std::optional<at::ScalarType> wire)
    : flat_(flat), group_(group), wire_(wire.value_or(flat.grads.scalar_type())) {
  const auto limit = static_cast<int64_t>(bucket_mb * 1024 * 1024 / static_cast<double>(flat.grads.element_size()));
  for (const FlatSlot& s : flat.slots) {
    if (buckets_.empty() || buckets_.back().numel >= std::max<int64_t>(limit, 1))
      buckets_.push_back({.offset = s.offset});
    Bucket& b = buckets_.back();
    b.numel = s.offset + s.numel - b.offset;
    if (std::find(b.layers.begin(), b.layers.end(), s.layer) == b.layers.end()) b.layers.push_back(s.layer);
  }
  // The padding travels with the last bucket, so the buckets tile the whole buffer.
  if (!buckets_.empty()) buckets_.back().numel = flat.grads.numel() - buckets_.back().offset;
  for (Bucket& b : buckets_) b.pending = b.layers.size();
}

void GradientReducer::layer_done(size_t layer) {
  for (Bucket& b : buckets_) {
    if (b.work) {
      b.work->test();  // progress for the ones in flight (see NOTE [Progress])
      continue;
    }
    if (std::find(b.layers.begin(), b.layers.end(), layer) != b.layers.end() && --b.pending == 0) start(b);
  }
}

void GradientReducer::start(Bucket& b) {
  at::Tensor range = flat_.grads.narrow(0, b.offset, b.numel);
  if (wire_ != range.scalar_type()) range = b.narrow = range.to(wire_);
  b.work = group_.all_reduce_async(range, dist::ReduceOp::Sum);
}

void GradientReducer::complete(Bucket& b) {
  b.work->wait();
  b.work.reset();
  if (b.narrow.defined()) flat_.grads.narrow(0, b.offset, b.numel).copy_(b.narrow);
  b.narrow.reset();
  b.pending = b.layers.size();
}

void GradientReducer::finish() {
  for (Bucket& b : buckets_) {
    if (!b.work) start(b);  // a bucket whose layers have no gradient this step (never in a GPT)
    complete(b);
  }
}

}  // namespace loom::replicas

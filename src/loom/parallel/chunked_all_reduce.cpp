#include "loom/parallel/chunked_all_reduce.h"

namespace loom::parallel {

void ChunkedAllReduce::start(at::Tensor chunk) {
  for (auto& work : pending_) work->test();
  pending_.push_back(tp_.all_reduce_async(chunk, dist::ReduceOp::Sum));
}

void ChunkedAllReduce::finish() {
  for (auto& work : pending_) work->wait();
  pending_.clear();
}

}  // namespace loom::parallel

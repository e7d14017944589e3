#pragma once
// The deterministic global sampler. Optimizer step s holds global samples
// [s * global_batch, (s + 1) * global_batch); micro-batch m of that step holds the micro_batch
// samples starting at s * global_batch + m * micro_batch. A data-parallel rank takes a contiguous
// run of micro-batches, so the serial run sees the same samples in the same micro-batches.
#include "loom/data/token_source.h"
#include "loom/nn/layer.h"

namespace loom::data {

struct BatchShape {
  int64_t global_batch;
  int64_t micro_batch;
  int64_t seq_len;
};

// Tokens and next-token targets of one micro-batch; loss_scale = 1 / (global_batch * seq_len).
nn::MicroBatch make_microbatch(const TokenSource& source, const BatchShape& shape, int64_t step,
                               int64_t microbatch_index);

}  // namespace loom::data

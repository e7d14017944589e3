#pragma once
// What a model trains on, as micro-batches in one global order: micro-batch `index` of step `step`
// is the same samples whatever the layout, so every rank computes the ones it needs (its dp
// share; an sp rank then keeps its segments of each sequence). The model kind chooses the source
// (models/registry.h).
#include <memory>
#include <string>

#include "loom/core/config.h"
#include "loom/nn/layer.h"

namespace loom::data {

// What a model kind's samples are: token sequences or click records (which `loom data` command
// writes them).
enum class SampleFormat : uint8_t { Tokens, Clicks };

class Batches {
 public:
  virtual ~Batches() = default;
  virtual nn::MicroBatch microbatch(int64_t step, int64_t index) const = 0;
  // One line for the run's header: what is read, and from where.
  virtual std::string describe() const = 0;
};

// Token sequences (data.source: synthetic, text:PATH or tokens:PATH), targets shifted by one.
std::unique_ptr<Batches> token_batches(const Config& config);
// Click samples (data.source: synthetic or clicks:PATH): ids per table, dense features, labels.
std::unique_ptr<Batches> click_batches(const Config& config);

}  // namespace loom::data

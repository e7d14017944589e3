#pragma once
// Synthetic text from a fixed random Markov chain: each token has four possible successors, with
// probabilities 0.6, 0.25, 0.1, 0.05 (entropy 1.03 nats). A model that learns the chain drives the
// loss from ln(vocab) towards that floor, so a falling loss is visible within a few dozen steps.
#include "loom/data/token_source.h"

namespace loom::data {

class MarkovSource final : public TokenSource {
 public:
  MarkovSource(int64_t vocab, uint64_t seed);
  void window(int64_t index, int64_t length, int64_t* out) const override;
  std::string describe() const override;
  // The chain's entropy rate: the lowest loss a model can reach on this data.
  static double entropy_nats();

 private:
  int64_t vocab_;
  uint64_t table_key_, walk_key_;
};

}  // namespace loom::data

#pragma once
// Choosing the next token from a position's logits. Greedy (temperature 0) takes the most likely
// id (the lowest among equals). Otherwise ids are drawn from softmax(logits / temperature),
// restricted first to the top_k most likely ids (0 = all) and then to the smallest set of the
// most likely ones whose probability reaches top_p (1 = all), renormalised. A draw is
// uniform01(stream_key(seed, "generate"), draw index) (loom/core/rng.h), compared against the
// kept ids' cumulative probabilities in float64, so a seed gives the same tokens on any machine.
#include <ATen/ATen.h>

#include <cstdint>

namespace loom::generate {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // in (0, 1]; 1 = no limit
  uint64_t seed = 0;
};

// InputError naming the flag (--temperature, --top-k, --top-p) whose value is out of range.
void check_sampling(const SamplingOptions& options);

// The probabilities a draw picks from, for logits [vocab]: float64 [vocab], zero outside the ids
// top_k and top_p keep, summing to 1. Not for greedy (temperature 0).
at::Tensor sampling_distribution(const at::Tensor& logits, const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // The next token for logits [vocab]; each call that draws uses the next counter of the stream.
  int64_t next(const at::Tensor& logits);

 private:
  SamplingOptions options_;
  uint64_t key_;
  uint64_t draws_ = 0;
};

}  // namespace loom::generate

#include "loom/generate/sampling.h"

#include <cmath>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::generate {

void check_sampling(const SamplingOptions& o) {
  LOOM_CHECK_INPUT(std::isfinite(o.temperature) && o.temperature >= 0,
                   "--temperature {} must be a finite number >= 0 (0 = greedy: the most likely token)", o.temperature);
  LOOM_CHECK_INPUT(o.top_k >= 0, "--top-k {} must be >= 0 (0 = no limit)", o.top_k);
  LOOM_CHECK_INPUT(o.top_p > 0 && o.top_p <= 1, "--top-p {} must be in (0, 1] (1 = no limit)", o.top_p);
}

at::Tensor sampling_distribution(const at::Tensor& logits, const SamplingOptions& o) {
  LOOM_CHECK(o.temperature > 0 && logits.dim() == 1, "[sampling] a distribution needs a temperature > 0 and logits [vocab]");
  const at::Tensor probs = at::softmax(logits.to(at::kDouble) / o.temperature, 0);
  // Most likely first; among equal probabilities the lower id first (a stable sort keeps id order).
  const auto [sorted, order] = at::sort(probs, /*stable=*/true, /*dim=*/0, /*descending=*/true);
  int64_t keep = sorted.size(0);
  if (o.top_k > 0) keep = std::min(keep, o.top_k);
  if (o.top_p < 1) {
    // The smallest prefix whose mass reaches top_p of what top_k kept: an id stays while the mass
    // before it is below that.
    const at::Tensor kept = sorted.narrow(0, 0, keep);
    const at::Tensor before = kept.cumsum(0) - kept;
    keep = std::max<int64_t>(1, (before < o.top_p * kept.sum()).sum().item<int64_t>());
  }
  at::Tensor out = at::zeros_like(probs);
  const at::Tensor ids = order.narrow(0, 0, keep), mass = sorted.narrow(0, 0, keep);
  out.index_put_({ids}, mass / mass.sum());
  return out;
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), key_(stream_key(options.seed, "generate")) {
  check_sampling(options);
}

int64_t Sampler::next(const at::Tensor& logits) {
  if (options_.temperature == 0) return logits.argmax().item<int64_t>();  // the first of equal maxima
  const at::Tensor cumulative = sampling_distribution(logits, options_).cumsum(0);
  const double u = uniform01(key_, draws_++) * cumulative[-1].item<double>();
  // The first id whose cumulative probability exceeds u: ids of zero probability are never it.
  const int64_t id = (cumulative <= u).sum().item<int64_t>();
  return std::min<int64_t>(id, cumulative.size(0) - 1);
}

}  // namespace loom::generate

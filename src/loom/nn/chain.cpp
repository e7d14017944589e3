#include "loom/nn/chain.h"

namespace loom::nn {

std::vector<Param*> Chain::params() const {
  std::vector<nn::Param*> all;
  for (const auto& layer : chain)
    for (nn::Param* p : layer->params()) all.push_back(p);
  return all;
}

std::vector<Buffer> Chain::buffers() const {
  std::vector<Buffer> all;
  for (const auto& layer : chain)
    for (Buffer& b : layer->buffers()) all.push_back(std::move(b));
  return all;
}

int64_t Chain::param_count() const {
  int64_t n = 0;
  for (const nn::Param* p : params()) n += p->numel();
  return n;
}

void Chain::initialise(uint64_t seed, const at::TensorOptions& options) {
  for (nn::Param* p : params())
    if (p->sparse == nullptr) nn::initialise(*p, seed, options);  // a sparse table initialises its own rows
}

Cost Chain::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  nn::Cost total;
  for (const auto& layer : chain) total += layer->cost(batch, seq, dtype_bytes);
  return total;
}

}  // namespace loom::nn

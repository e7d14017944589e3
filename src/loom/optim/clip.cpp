#include "loom/optim/clip.h"

#include <cmath>

namespace loom::optim {

double global_grad_norm(const std::vector<nn::Param*>& params) {
  double sum_sq = 0;
  for (const nn::Param* p : params) {
    const double n = p->grad.norm().item<double>();
    sum_sq += n * n;
  }
  return std::sqrt(sum_sq);
}

double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (max_norm > 0 && norm > max_norm) {
    const double factor = max_norm / (norm + 1e-6);
    for (nn::Param* p : params) p->grad.mul_(factor);
  }
  return norm;
}

}  // namespace loom::optim

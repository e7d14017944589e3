#include "loom/optim/clip.h"

#include <cmath>

namespace loom::optim {

std::pair<double, double> grad_norm_squares(const std::vector<nn::Param*>& params) {
  double replicated = 0, sharded = 0;
  for (const nn::Param* p : params) {
    const double n = p->grad.norm().item<double>();
    (p->shard.dim >= 0 ? sharded : replicated) += n * n;
  }
  return {replicated, sharded};
}

double global_grad_norm(const std::vector<nn::Param*>& params, dist::Communicator& tp) {
  auto [replicated, sharded] = grad_norm_squares(params);
  if (tp.size() > 1) {
    at::Tensor t = at::full({1}, sharded, at::TensorOptions().dtype(at::kDouble));
    tp.all_reduce(t, dist::ReduceOp::Sum);
    sharded = t.item<double>();
  }
  return std::sqrt(replicated + sharded);
}

double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm, dist::Communicator& tp) {
  const double norm = global_grad_norm(params, tp);
  if (max_norm > 0 && norm > max_norm) {
    const double factor = max_norm / (norm + 1e-6);
    for (nn::Param* p : params) p->grad.mul_(factor);
  }
  return norm;
}

}  // namespace loom::optim

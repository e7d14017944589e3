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

double combine_norm_squares(double replicated, double sharded, dist::Communicator& tp, dist::Communicator* pp) {
  if (tp.size() > 1) {
    at::Tensor t = at::full({1}, sharded, at::TensorOptions().dtype(at::kDouble));
    tp.all_reduce(t, dist::ReduceOp::Sum);
    sharded = t.item<double>();
  }
  double total = replicated + sharded;
  if (pp != nullptr && pp->size() > 1) {
    at::Tensor t = at::full({1}, total, at::TensorOptions().dtype(at::kDouble));
    pp->all_reduce(t, dist::ReduceOp::Sum);
    total = t.item<double>();
  }
  return std::sqrt(total);
}

double global_grad_norm(const std::vector<nn::Param*>& params, dist::Communicator& tp, dist::Communicator* pp) {
  auto [replicated, sharded] = grad_norm_squares(params);
  return combine_norm_squares(replicated, sharded, tp, pp);
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm, dist::Communicator& tp,
                      dist::Communicator* pp, std::pair<double, double> extra) {
  auto [replicated, sharded] = grad_norm_squares(params);
  const double norm = combine_norm_squares(replicated + extra.first, sharded + extra.second, tp, pp);
  const double factor = clip_factor(norm, max_norm);
  if (factor != 1.0)
    for (nn::Param* p : params) p->grad.mul_(factor);
  return norm;
}

}  // namespace loom::optim

#include "loom/replicas/expert_optimizer.h"

#include <algorithm>

#include "loom/optim/clip.h"

namespace loom::replicas {
namespace {

bool is_expert(const nn::Param& p) { return p.sparse == nullptr && expert_sharded(p); }

// The model's parameters sharded over ep, initialised first where `initialise` is given and they
// have no value yet (ZeRO-2/3 leave them to whoever holds them).
std::vector<nn::Param*> expert_params(models::Model& model, const std::function<void(nn::Param&)>& initialise) {
  std::vector<nn::Param*> out;
  for (nn::Param* p : model.params()) {
    if (!is_expert(*p)) continue;
    if (initialise && !p->value.defined()) initialise(*p);
    out.push_back(p);
  }
  return out;
}

}  // namespace

bool ExpertOptimizer::needed(models::Model& model) {
  const std::vector<nn::Param*> params = model.params();
  return std::any_of(params.begin(), params.end(), [](const nn::Param* p) { return is_expert(*p); });
}

ExpertOptimizer::ExpertOptimizer(models::Model& model, dist::Communicator& ep, dist::Communicator& replicas,
                                 double bucket_mb, std::optional<at::ScalarType> wire,
                                 const optim::AdamWOptions& adamw, const std::function<void(nn::Param&)>& initialise)
    : ep_(ep),
      params_(expert_params(model, initialise)),
      flat_(model, 1, FlatParams::Which::Experts),
      reducer_(flat_, replicas, bucket_mb, wire),
      adamw_(std::make_unique<optim::AdamW>(params_, adamw)) {}

double ExpertOptimizer::norm_square() {
  double square = 0;
  for (const nn::Param* p : params_) square += optim::grad_norm_square(*p);
  if (ep_.size() == 1) return square;
  at::Tensor t = at::full({1}, square, at::TensorOptions().dtype(at::kDouble));
  ep_.all_reduce(t, dist::ReduceOp::Sum);  // each rank of the group holds other experts
  return t.item<double>();
}

void ExpertOptimizer::step(double lr, double clip_factor) {
  if (clip_factor != 1.0) flat_.grads.mul_(clip_factor);
  adamw_->step(lr);
}

}  // namespace loom::replicas

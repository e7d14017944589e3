#include "loom/nn/layer_norm.h"

#include "loom/nn/precision.h"

namespace loom::nn {

namespace {
constexpr double kLayerNormEps = 1e-5;
}

LayerNorm::LayerNorm(const std::string& name, int64_t dim, bool sequence_sharded) : dim_(dim) {
  gain = Param{.name = name + ".weight", .full_shape = {dim}, .placements = tp_sequence_placements(sequence_sharded),
               .init = Init::Ones};
  bias = Param{.name = name + ".bias", .full_shape = {dim}, .placements = tp_sequence_placements(sequence_sharded)};
}

NormOutput LayerNorm::forward(const at::Tensor& x) const {
  // Statistics in float32 for bfloat16 activations (NOTE [Mixed precision]); y in x's type.
  auto [y, mean, rstd] = at::native_layer_norm(widen(x), {dim_}, gain.value, bias.value, kLayerNormEps);
  return {to_type(y, x.scalar_type()), mean, rstd};
}

NormGrads LayerNorm::backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                              const at::Tensor& rstd) const {
  auto [dx, dgain, dbias] = at::native_layer_norm_backward(widen(dy), widen(x), {dim_}, mean, rstd, gain.value,
                                                           bias.value, {true, true, true});
  return {to_type(dx, dy.scalar_type()), dgain, dbias};
}

void LayerNorm::accumulate(const NormGrads& grads) {
  gain.grad.add_(grads.dgain);
  bias.grad.add_(grads.dbias);
}

}  // namespace loom::nn

#include "loom/nn/rms_norm.h"

#include "loom/core/error.h"
#include "loom/nn/precision.h"

namespace loom::nn {

namespace {
constexpr double kRmsNormEps = 1e-5;
}

RmsNorm::RmsNorm(const std::string& name, int64_t dim, bool sequence_sharded) : dim_(dim) {
  gain = Param{.name = name + ".weight", .full_shape = {dim}, .placements = tp_sequence_placements(sequence_sharded),
               .init = Init::Ones};
}

RmsNormOutput RmsNorm::forward(const at::Tensor& x) const {
  LOOM_CHECK(x.size(-1) == dim_, "RmsNorm: input's last dim {} is not the norm's {}", x.size(-1), dim_);
  // In float32 for bfloat16 activations (NOTE [Mixed precision]); y in x's type.
  const at::Tensor xw = widen(x);
  const at::Tensor rstd = xw.square().mean(-1, /*keepdim=*/true).add_(kRmsNormEps).rsqrt_();
  return {to_type(xw * rstd * gain.value, x.scalar_type()), rstd};
}

// NOTE [RMSNorm backward]: with n = dim, r = rstd = (mean(x^2) + eps)^(-1/2), xhat = x r and
// y = xhat * gain, the gain gradient is the sum over tokens of dy * xhat. For the input, let
// g = dy * gain (the gradient with respect to xhat = x r). Since dr/dx_j = -r^3 x_j / n,
//   dx_j = r g_j - (r^3 x_j / n) sum_i g_i x_i = r (g_j - xhat_j mean_i(g_i xhat_i)).
// Unlike LayerNorm's there is no mean term: the input is not centred.
RmsNormGrads RmsNorm::backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd) const {
  const at::Tensor xhat = widen(x) * rstd, dyw = widen(dy);
  at::Tensor dgain = (dyw * xhat).reshape({-1, dim_}).sum(0);
  const at::Tensor g = dyw * gain.value;
  const at::Tensor projection = (g * xhat).mean(-1, /*keepdim=*/true);
  at::Tensor dx = g.sub_(xhat.mul_(projection)).mul_(rstd);
  return {to_type(dx, dy.scalar_type()), dgain};
}

void RmsNorm::accumulate(const RmsNormGrads& grads) { gain.grad.add_(grads.dgain); }

}  // namespace loom::nn

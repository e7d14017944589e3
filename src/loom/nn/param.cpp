#include "loom/nn/param.h"

namespace loom::nn {

void initialise(Param& p, uint64_t seed, at::ScalarType dtype) {
  std::vector<int64_t> shape = p.full_shape;
  if (p.shard.dim >= 0) shape[p.shard.dim] = p.shard.length;
  const auto options = at::TensorOptions().dtype(dtype);
  switch (p.init) {
    case Init::Zeros: p.value = at::zeros(shape, options); break;
    case Init::Ones: p.value = at::ones(shape, options); break;
    case Init::Normal:
      p.value = normal_tensor(stream_key(seed, p.name), p.full_shape, p.shard, p.init_std, dtype);
      break;
  }
  p.grad = at::zeros(shape, options);
}

void zero_grad(Param& p) { p.grad.zero_(); }

}  // namespace loom::nn

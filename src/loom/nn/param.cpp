#include "loom/nn/param.h"

#include <algorithm>

namespace loom::nn {

void initialise(Param& p, uint64_t seed, const at::TensorOptions& options) {
  std::vector<int64_t> shape = p.full_shape;
  if (p.shard.dim >= 0) shape[p.shard.dim] = p.shard.length;
  switch (p.init) {
    case Init::Zeros: p.value = at::zeros(shape, options); break;
    case Init::Ones: p.value = at::ones(shape, options); break;
    case Init::Normal:
      p.value = normal_tensor(stream_key(seed, p.name), p.full_shape, p.shard, p.init_std,
                              at::typeMetaToScalarType(options.dtype()))
                    .to(options.device());
      break;
  }
  p.grad = at::zeros(shape, options);
  zero_padding(p, p.value, p.shard.dim == 0 ? p.shard.start : 0);
}

void zero_padding(const Param& p, at::Tensor& rows, int64_t first_row) {
  if (p.padding_rows == 0 || rows.dim() == 0) return;
  const int64_t real = p.full_shape[0] - p.padding_rows;  // rows from here on are padding
  const int64_t from = std::clamp<int64_t>(real - first_row, 0, rows.size(0));
  rows.narrow(0, from, rows.size(0) - from).zero_();
}

void zero_grad(Param& p) { p.grad.zero_(); }

}  // namespace loom::nn

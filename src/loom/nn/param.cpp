#include "loom/nn/param.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::nn {

const AxisPlacement* Param::on(std::string_view axis) const {
  for (const AxisPlacement& a : placements)
    if (a.axis == axis) return &a;
  return nullptr;
}

Placement Param::value_on(std::string_view axis) const {
  const AxisPlacement* a = on(axis);
  return a != nullptr ? a->value : Placement::replicate();
}

Placement Param::grad_on(std::string_view axis) const {
  if (const AxisPlacement* a = on(axis)) return a->grad;
  return data_axis(axis) ? Placement::partial() : Placement::replicate();
}

Shard Param::part() const {
  Shard out;
  for (const AxisPlacement& a : placements) {
    if (!a.value.is_shard()) continue;
    LOOM_CHECK(out.dim < 0, "[param] {} is sharded over two axes; a part is one slice", name);
    LOOM_CHECK(a.value.dim >= 0 && static_cast<size_t>(a.value.dim) < full_shape.size(),
               "[param] {} is sharded along dimension {} of a {}-d shape", name, a.value.dim, full_shape.size());
    const int64_t size = full_shape[static_cast<size_t>(a.value.dim)];
    out = {a.value.dim, std::min(piece_length(size, a.size) * a.rank, size), real_length(size, a.size, a.rank)};
  }
  return out;
}

std::vector<int64_t> Param::part_shape() const {
  std::vector<int64_t> shape = full_shape;
  const Shard s = part();
  if (s.dim >= 0) shape[static_cast<size_t>(s.dim)] = s.length;
  return shape;
}

int64_t Param::numel() const {
  int64_t n = 1;
  for (int64_t d : part_shape()) n *= d;
  return n;
}

Param flat_run(const Param& of, std::string name, int64_t numel) {
  Param run{.name = std::move(name), .full_shape = {numel}, .weight_decay = of.weight_decay};
  for (const AxisPlacement& a : of.placements)
    if (a.value.is_shard()) run.placements.push_back(AxisPlacement::sharded(a.axis, 0, 0, 1));
  return run;
}

void initialise(Param& p, uint64_t seed, const at::TensorOptions& options) {
  const std::vector<int64_t> shape = p.part_shape();
  const Shard shard = p.part();
  switch (p.init) {
    case Init::Zeros: p.value = at::zeros(shape, options); break;
    case Init::Ones: p.value = at::ones(shape, options); break;
    case Init::Normal:
      p.value = normal_tensor(stream_key(seed, p.name), p.full_shape, shard, p.init_std,
                              at::typeMetaToScalarType(options.dtype()))
                    .to(options.device());
      break;
  }
  p.grad = at::zeros(shape, options);
  zero_padding(p, p.value, shard.dim == 0 ? shard.start : 0);
}

void zero_padding(const Param& p, at::Tensor& rows, int64_t first_row) {
  if (p.padding_rows == 0 || rows.dim() == 0) return;
  const int64_t real = p.full_shape[0] - p.padding_rows;  // rows from here on are padding
  const int64_t from = std::clamp<int64_t>(real - first_row, 0, rows.size(0));
  rows.narrow(0, from, rows.size(0) - from).zero_();
}

void zero_grad(Param& p) { p.grad.zero_(); }

}  // namespace loom::nn

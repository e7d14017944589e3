#include "loom/parallel/tensor_parallel_linear.h"

#include "loom/core/error.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"

namespace loom::parallel {
namespace {

int64_t split(int64_t size, const dist::Communicator& tp, const std::string& what) {
  LOOM_CHECK(size % tp.size() == 0, "[tp] {} ({}) must be divisible by tp ({})", what, size, tp.size());
  return size / tp.size();
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const std::string& name, int64_t in_features, int64_t out_features,
                                           bool bias, double init_std, dist::Communicator& tp, int64_t groups)
    : tp_(tp), in_(in_features) {
  LOOM_CHECK(groups >= 1 && out_features % groups == 0, "[tp] {}: {} outputs are not {} equal groups", name,
             out_features, groups);
  const int64_t per_group = out_features / groups;
  const int64_t local = split(per_group, tp, name + " outputs per group");
  local_out_ = local * groups;
  // One group: [out, in] split along dim 0. Several: [groups, out/groups, in] split along dim 1.
  // Both enumerate the elements of the serial [out, in] weight in the same order.
  const bool grouped = groups > 1;
  weight = nn::Param{.name = name + ".weight",
                     .full_shape = grouped ? std::vector<int64_t>{groups, per_group, in_features}
                                           : std::vector<int64_t>{out_features, in_features},
                     .placements = {AxisPlacement::sharded("tp", grouped ? 1 : 0, tp.rank(), tp.size())},
                     .init = nn::Init::Normal, .init_std = init_std, .weight_decay = true};
  if (bias) {
    this->bias = nn::Param{.name = name + ".bias",
                           .full_shape = grouped ? std::vector<int64_t>{groups, per_group}
                                                 : std::vector<int64_t>{out_features},
                           .placements = {AxisPlacement::sharded("tp", grouped ? 1 : 0, tp.rank(), tp.size())}};
  }
}

at::Tensor ColumnParallelLinear::forward(const at::Tensor& x) const {
  const at::Tensor w = nn::compute_value(weight).view({local_out_, in_});
  const at::Tensor b = bias.name.empty() ? at::Tensor() : nn::compute_value(bias).view({local_out_});
  return nn::linear(x, w, b, weight.products);
}

at::Tensor ColumnParallelLinear::backward_input_partial(const at::Tensor& dy) const {
  return nn::matmul(dy, nn::compute_value(weight).view({local_out_, in_}), weight.products).contiguous();
}

at::Tensor ColumnParallelLinear::backward_input(const at::Tensor& dy) const {
  at::Tensor dx = backward_input_partial(dy);
  tp_.all_reduce(dx, dist::ReduceOp::Sum);
  return dx;
}

void ColumnParallelLinear::backward_weight(const at::Tensor& x, const at::Tensor& dy) {
  const at::Tensor dy2 = dy.reshape({-1, local_out_});
  nn::add_product(weight.grad.view({local_out_, in_}), dy2.t(), x.reshape({-1, in_}), weight.products);
  if (!bias.name.empty()) bias.grad.view({local_out_}).add_(nn::sum_rows(dy2, bias.grad.scalar_type()));
}

std::vector<nn::Param*> ColumnParallelLinear::params() {
  if (bias.name.empty()) return {&weight};
  return {&weight, &bias};
}

RowParallelLinear::RowParallelLinear(const std::string& name, int64_t in_features, int64_t out_features, bool bias,
                                     double init_std, dist::Communicator& tp)
    : tp_(tp), out_(out_features), local_in_(split(in_features, tp, name + " inputs")) {
  weight = nn::Param{.name = name + ".weight", .full_shape = {out_features, in_features},
                     .placements = {AxisPlacement::sharded("tp", 1, tp.rank(), tp.size())}, .init = nn::Init::Normal,
                     .init_std = init_std, .weight_decay = true};
  if (bias) this->bias = nn::Param{.name = name + ".bias", .full_shape = {out_features}};
}

at::Tensor RowParallelLinear::forward_partial(const at::Tensor& x_local) const {
  return nn::matmul(x_local, nn::compute_value(weight).t(), weight.products).contiguous();
}

void RowParallelLinear::add_bias(at::Tensor& y) const {
  if (!bias.name.empty()) y.add_(nn::compute_value(bias));
}

at::Tensor RowParallelLinear::forward(const at::Tensor& x_local) const {
  at::Tensor y = forward_partial(x_local);
  tp_.all_reduce(y, dist::ReduceOp::Sum);
  add_bias(y);
  return y;
}

at::Tensor RowParallelLinear::backward_input(const at::Tensor& dy) const {
  return nn::matmul(dy, nn::compute_value(weight), weight.products);
}

void RowParallelLinear::backward_weight(const at::Tensor& x_local, const at::Tensor& dy) {
  const at::Tensor dy2 = dy.reshape({-1, out_});
  nn::add_product(weight.grad, dy2.t(), x_local.reshape({-1, local_in_}), weight.products);
  if (!bias.name.empty()) bias.grad.add_(nn::sum_rows(dy2, bias.grad.scalar_type()));
}

std::vector<nn::Param*> RowParallelLinear::params() {
  if (bias.name.empty()) return {&weight};
  return {&weight, &bias};
}

}  // namespace loom::parallel

#include "loom/blocks/dlrm_layers.h"

#include <algorithm>

#include <fmt/format.h>

#include <cmath>

#include "loom/nn/precision.h"
#include "loom/nn/products.h"


namespace loom::blocks {
namespace {

struct DenseState : nn::SavedState {
  at::Tensor x, y, dz;  // input, output (its sign is ReLU's mask), pre-activation gradient
  void for_each_tensor(const nn::TensorVisitor& visit) override { visit("x", x), visit("y", y), visit("dz", dz); }
};

struct BagsState : nn::SavedState {
  at::Tensor tokens, dy;
  void for_each_tensor(const nn::TensorVisitor& visit) override { visit("tokens", tokens), visit("dy", dy); }
};

struct LossState : nn::SavedState {
  at::Tensor x, dz;  // input, d loss / d logit (loss scale included)
  void for_each_tensor(const nn::TensorVisitor& visit) override { visit("x", x), visit("dz", dz); }
};

}  // namespace

Dense::Dense(std::string name, int64_t in, int64_t out, bool reads_features)
    : name_(std::move(name)), in_(in), out_(out), reads_features_(reads_features) {
  weight = nn::Param{.name = name_ + ".weight", .full_shape = {out, in}, .init = nn::Init::Normal,
                 .init_std = std::sqrt(2.0 / static_cast<double>(in)), .weight_decay = true};
  bias = nn::Param{.name = name_ + ".bias", .full_shape = {out}};
}

at::Tensor Dense::forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) {
  auto& s = saved.emplace<DenseState>();
  const at::Tensor& w = nn::compute_value(weight);
  s.x = reads_features_ ? mb.dense.to(w.scalar_type()) : x;
  s.y = nn::linear(s.x, w, nn::compute_value(bias), weight.products).relu_();
  return s.y;
}

at::Tensor Dense::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<DenseState>();
  s.dz = dy * s.y.gt(0).to(dy.scalar_type());
  s.y = at::Tensor();
  return reads_features_ ? at::Tensor() : nn::matmul(s.dz, nn::compute_value(weight), weight.products);
}

void Dense::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<DenseState>();
  nn::add_product(weight.grad, s.dz.t(), s.x, weight.products);
  bias.grad.add_(nn::sum_rows(s.dz, bias.grad.scalar_type()));
  saved.clear();
}

nn::Cost Dense::cost(int64_t batch, int64_t, int64_t dtype_bytes) const {
  const auto gemm = static_cast<double>(2 * batch * in_ * out_);
  nn::Cost c;
  c.forward_flops = gemm;
  c.backward_input_flops = reads_features_ ? 0 : gemm;
  c.backward_weight_flops = gemm;
  c.saved_bytes = static_cast<double>(batch * (in_ + out_) * dtype_bytes);
  c.param_bytes = static_cast<double>((in_ * out_ + out_) * dtype_bytes);
  c.gemm_dim = static_cast<double>(std::min({batch, in_, out_}));
  c.elementwise_bytes = static_cast<double>(2 * batch * out_ * dtype_bytes);  // bias and activation
  return c;
}

EmbeddingBags::EmbeddingBags(int64_t tables, int64_t rows, int64_t width, int64_t bag_size)
    : rows_(rows), width_(width), bag_(bag_size) {
  for (int64_t f = 0; f < tables; ++f)
    this->tables.push_back(nn::Param{.name = fmt::format("bags.{}.weight", f), .full_shape = {rows, width},
                                 .init = nn::Init::Normal, .init_std = 1.0 / std::sqrt(static_cast<double>(width)),
                                 .embedding = true});
}

std::vector<nn::Param*> EmbeddingBags::params() {
  std::vector<nn::Param*> out;
  for (nn::Param& t : tables) out.push_back(&t);
  return out;
}

at::Tensor EmbeddingBags::ids_of(const nn::MicroBatch& mb, size_t table) const {
  return mb.tokens.narrow(1, static_cast<int64_t>(table) * bag_, bag_).reshape({-1});
}

void EmbeddingBags::pull_rows(const std::vector<nn::MicroBatch>& microbatches) {
  for (size_t f = 0; f < tables.size(); ++f) {
    if (tables[f].sparse == nullptr) continue;
    std::vector<at::Tensor> ids;
    for (const nn::MicroBatch& mb : microbatches) ids.push_back(ids_of(mb, f));
    tables[f].sparse->pull(ids.empty() ? at::empty({0}, at::kLong) : at::cat(ids));
  }
}

at::Tensor EmbeddingBags::forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) {
  auto& s = saved.emplace<BagsState>();
  s.tokens = mb.tokens;
  const int64_t batch = x.size(0);
  std::vector<at::Tensor> parts{x};
  for (size_t f = 0; f < tables.size(); ++f) {
    const at::Tensor ids = ids_of(mb, f);
    const at::Tensor rows = tables[f].sparse != nullptr ? tables[f].sparse->lookup(ids)
                                                        : nn::compute_value(tables[f]).index_select(0, ids);
    parts.push_back(nn::to_type(rows.view({batch, bag_, width_}).sum(1), x.scalar_type()));
  }
  return at::cat(parts, 1);
}

at::Tensor EmbeddingBags::backward_input(const at::Tensor& dy, nn::Saved& saved) {
  auto& s = saved.get<BagsState>();
  s.dy = dy;
  return dy.narrow(1, 0, width_).contiguous();
}

void EmbeddingBags::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<BagsState>();
  const int64_t batch = s.dy.size(0);
  nn::MicroBatch mb;
  mb.tokens = s.tokens;
  for (size_t f = 0; f < tables.size(); ++f) {
    // Every row of a bag receives the bag's gradient.
    const at::Tensor g = s.dy.narrow(1, static_cast<int64_t>(f + 1) * width_, width_)
                             .unsqueeze(1)
                             .expand({batch, bag_, width_})
                             .reshape({batch * bag_, width_});
    if (tables[f].sparse != nullptr)
      tables[f].sparse->accumulate(ids_of(mb, f), nn::widen(g));  // master rows
    else
      nn::index_add_into(tables[f].grad, 0, ids_of(mb, f), g);
  }
  saved.clear();
}

nn::Cost EmbeddingBags::cost(int64_t batch, int64_t, int64_t dtype_bytes) const {
  const auto lookups = static_cast<double>(batch * bag_ * static_cast<int64_t>(tables.size()));
  nn::Cost c;
  c.forward_flops = lookups * static_cast<double>(width_);  // the bag sums
  c.backward_weight_flops = c.forward_flops;
  c.saved_bytes = lookups * 8;
  c.param_bytes = static_cast<double>(static_cast<int64_t>(tables.size()) * rows_ * width_ * dtype_bytes);
  return c;
}

ClickLoss::ClickLoss(int64_t in) : in_(in) {
  weight = nn::Param{.name = "click.weight", .full_shape = {1, in}, .init = nn::Init::Normal,
                 .init_std = 1.0 / std::sqrt(static_cast<double>(in)), .weight_decay = true};
  bias = nn::Param{.name = "click.bias", .full_shape = {1}};
}

// loss = scale * sum_i max(z_i, 0) - z_i y_i + log(1 + exp(-|z_i|)), the stable form of BCE on
// the logit z; its gradient is scale * (sigmoid(z) - y).
at::Tensor ClickLoss::forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) {
  auto& s = saved.emplace<LossState>();
  s.x = x;
  // The product in the activations' type, the loss in float32 or wider (NOTE [Mixed precision]).
  const at::Tensor z = nn::widen(nn::linear(x, nn::compute_value(weight), nn::compute_value(bias), weight.products).squeeze(1));
  const at::Tensor y = mb.targets.reshape({-1}).to(z.scalar_type());
  const at::Tensor loss = (z.clamp_min(0) - z * y + z.abs().neg_().exp_().log1p_()).sum().mul_(mb.loss_scale);
  s.dz = nn::to_type((z.sigmoid() - y).mul_(mb.loss_scale), x.scalar_type());
  return loss;
}

at::Tensor ClickLoss::backward_input(const at::Tensor&, nn::Saved& saved) {
  auto& s = saved.get<LossState>();
  return nn::matmul(s.dz.unsqueeze(1), nn::compute_value(weight), weight.products);
}

void ClickLoss::backward_weight(nn::Saved& saved) {
  auto& s = saved.get<LossState>();
  nn::add_product(weight.grad, s.dz.unsqueeze(0), s.x, weight.products);
  bias.grad.add_(at::sum(s.dz, bias.grad.scalar_type()));
  saved.clear();
}

nn::Cost ClickLoss::cost(int64_t batch, int64_t, int64_t dtype_bytes) const {
  const auto gemm = static_cast<double>(2 * batch * in_);
  nn::Cost c;
  c.forward_flops = c.backward_input_flops = c.backward_weight_flops = gemm;
  c.saved_bytes = static_cast<double>(batch * (in_ + 1) * dtype_bytes);
  c.param_bytes = static_cast<double>((in_ + 1) * dtype_bytes);
  return c;
}

}  // namespace loom::blocks

#include "loom/blocks/block_norm.h"

namespace loom::blocks {

void NormState::for_each_tensor(const nn::TensorVisitor& visit) {
  visit("norm.x", x), visit("norm.mean", mean), visit("norm.rstd", rstd);
  visit("norm.dgain", dgain), visit("norm.dbias", dbias);
}

BlockNorm::BlockNorm(NormKind kind, const std::string& name, int64_t dim, bool sequence_sharded) : dim_(dim) {
  if (kind == NormKind::Layer) layer_.emplace(name, dim, sequence_sharded);
  else rms_.emplace(name, dim, sequence_sharded);
}

at::Tensor BlockNorm::forward(const at::Tensor& x, NormState& s) const {
  s.x = x;
  if (layer_) {
    nn::NormOutput n = layer_->forward(x);
    s.mean = n.mean, s.rstd = n.rstd;
    return n.y;
  }
  nn::RmsNormOutput n = rms_->forward(x);
  s.rstd = n.rstd;
  return n.y;
}

at::Tensor BlockNorm::backward(const at::Tensor& dy, NormState& s) const {
  at::Tensor dx;
  if (layer_) {
    nn::NormGrads g = layer_->backward(dy, s.x, s.mean, s.rstd);
    dx = std::move(g.dx), s.dgain = std::move(g.dgain), s.dbias = std::move(g.dbias);
  } else {
    nn::RmsNormGrads g = rms_->backward(dy, s.x, s.rstd);
    dx = std::move(g.dx), s.dgain = std::move(g.dgain);
  }
  s.x.reset(), s.mean.reset(), s.rstd.reset();
  return dx;
}

void BlockNorm::accumulate(NormState& s) {
  if (layer_) layer_->accumulate({.dgain = s.dgain, .dbias = s.dbias});
  else rms_->accumulate({.dgain = s.dgain});
  s.dgain.reset(), s.dbias.reset();
}

std::vector<nn::Param*> BlockNorm::params() { return layer_ ? layer_->params() : rms_->params(); }

int64_t BlockNorm::param_elements() const { return (layer_ ? 2 : 1) * dim_; }

int64_t BlockNorm::saved_elements(int64_t rows) const { return rows * dim_ + (layer_ ? 2 : 1) * rows; }

}  // namespace loom::blocks

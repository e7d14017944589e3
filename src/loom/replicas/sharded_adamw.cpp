#include "loom/replicas/sharded_adamw.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/optim/clip.h"

namespace loom::replicas {

ShardedAdamW::ShardedAdamW(FlatParams& flat, dist::Communicator& dp, dist::Communicator& tp,
                           dist::Communicator& pp, optim::AdamWOptions options, std::optional<at::ScalarType> wire)
    : flat_(flat), dp_(dp), tp_(tp), pp_(pp), wire_(wire.value_or(flat.grads.scalar_type())) {
  LOOM_CHECK(flat.values.numel() % dp.size() == 0, "[zero] flat buffer of {} is not padded to {} shards",
             flat.values.numel(), dp.size());
  shard_numel_ = flat.values.numel() / dp.size();
  shard_offset_ = shard_numel_ * dp.rank();
  shard_grad_ = at::zeros({shard_numel_}, flat.grads.options());
  const int64_t end = shard_offset_ + shard_numel_;
  for (const FlatSlot& s : flat.slots) {
    const int64_t lo = std::max(s.offset, shard_offset_), hi = std::min(s.offset + s.numel, end);
    if (lo >= hi) continue;
    nn::Param part = nn::flat_run(*s.param, fmt::format("{}[{}:{}]", s.param->name, lo - s.offset, hi - s.offset),
                                  hi - lo);
    part.value = flat.values.narrow(0, lo, hi - lo);
    part.grad = shard_grad_.narrow(0, lo - shard_offset_, hi - lo);
    shard_params_.push_back(std::move(part));
    parts_.push_back({s.param, lo - s.offset});
  }
  std::vector<nn::Param*> pointers;
  for (nn::Param& p : shard_params_) pointers.push_back(&p);
  adamw_ = std::make_unique<optim::AdamW>(std::move(pointers), options);
}

double ShardedAdamW::step(double lr, double clip, std::pair<double, double> extra,
                          const std::function<void(double)>& before_update) {
  if (wire_ == flat_.grads.scalar_type()) {
    dp_.reduce_scatter(flat_.grads, shard_grad_, dist::ReduceOp::Sum);
  } else {  // parallel.grad_dtype: half the bytes, summed in the narrow type, widened back
    at::Tensor shard = at::empty({shard_numel_}, shard_grad_.options().dtype(wire_));
    dp_.reduce_scatter(flat_.grads.to(wire_), shard, dist::ReduceOp::Sum);
    shard_grad_.copy_(shard);
  }
  const double norm = optim::sharded_grad_norm(shard_params_, dp_, extra, tp_, &pp_);  // this dp shard's
  if (before_update) before_update(norm);
  const double factor = optim::clip_factor(norm, clip);
  if (factor != 1.0) shard_grad_.mul_(factor);
  adamw_->step(lr);
  const at::Tensor mine = flat_.values.narrow(0, shard_offset_, shard_numel_).clone();
  dp_.all_gather(mine, flat_.values);
  return norm;
}

}  // namespace loom::replicas

#include "loom/replicas/flat_params.h"

#include "loom/core/error.h"

namespace loom::replicas {

void check_summed_over_data_axes(const nn::Param& p) {
  for (const char* axis : {"dp", "sp", "ep"})
    LOOM_CHECK(p.grad_on(axis).is_partial(), "[replicas] {}'s gradient is {} over {}; the dense path sums it there",
               p.name, p.grad_on(axis).text(), axis);
}

FlatParams::FlatParams(models::Model& model, int64_t pad_multiple, Which which) {
  for (size_t layer = model.chain.size(); layer-- > 0;) {
    for (nn::Param* p : model.chain[layer]->params()) {
      if (p->sparse != nullptr) continue;  // its rows live on their owners (NOTE [Sparse exchange])
      if (expert_sharded(*p) != (which == Which::Experts)) continue;
      if (which == Which::Dense) check_summed_over_data_axes(*p);
      slots.push_back({p, layer, numel, p->numel()});
      numel += p->numel();
    }
  }
  const int64_t padded = (numel + pad_multiple - 1) / pad_multiple * pad_multiple;
  LOOM_CHECK(!slots.empty() || which == Which::Experts, "[flat] the model has no dense parameters");
  if (slots.empty()) return;
  const auto options = slots.front().param->value.options();
  // Release the per-parameter gradients first and each value as soon as it is copied, so the
  // move never holds more than twice the parameters (what the budget check assumes).
  for (const FlatSlot& s : slots) s.param->grad.reset();
  values = at::zeros({padded}, options);
  for (const FlatSlot& s : slots) {
    const auto shape = s.param->value.sizes().vec();
    values.narrow(0, s.offset, s.numel).copy_(s.param->value.reshape({-1}));
    s.param->value = values.narrow(0, s.offset, s.numel).view(shape);
  }
  grads = at::zeros({padded}, options);
  for (const FlatSlot& s : slots) s.param->grad = grads.narrow(0, s.offset, s.numel).view(s.param->value.sizes());
}

}  // namespace loom::replicas

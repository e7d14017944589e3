#include "loom/nn/gradient_check.h"

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "loom/core/error.h"

namespace loom::nn {

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>();
  const double ref = b.to(at::kDouble).norm().item<double>();
  return diff / std::max(ref, 1e-6);
}

double GradientCheck::worst() const {
  if (!problems.empty()) return std::numeric_limits<double>::infinity();
  double worst = std::max(output, input);
  for (const auto& [name, error] : params) worst = std::max(worst, error);
  return worst;
}

std::string GradientCheck::describe() const {
  std::string text = fmt::format("layer \"{}\": output {:.3g}, input gradient {:.3g}", layer, output, input);
  for (const auto& [name, error] : params) text += fmt::format(", {} {:.3g}", name, error);
  if (!released) text += "; backward_weight kept what forward saved";
  for (const std::string& problem : problems) text += "; " + problem;
  return text;
}

namespace {

// `what`'s shape against the reference's: a mismatch is a problem, not an error to measure.
double compared(GradientCheck& check, const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (!got.defined() || !want.defined()) {
    check.problems.push_back(fmt::format("{}: {} is undefined", what, got.defined() ? "the reference's" : "the layer's"));
    return 0;
  }
  if (got.sizes() != want.sizes()) {
    check.problems.push_back(
        fmt::format("{} has shape [{}], the reference's [{}]", what, fmt::join(got.sizes(), ", "), fmt::join(want.sizes(), ", ")));
    return 0;
  }
  return relative_error(got, want);
}

}  // namespace

GradientCheck check_gradients(Layer& layer, const at::Tensor& x, const MicroBatch& mb,
                              const AutogradReference& reference, const at::Tensor& dy) {
  GradientCheck check{.layer = layer.name()};
  const std::vector<Param*> params = layer.params();
  for (Param* p : params) {
    LOOM_CHECK_INPUT(p->sparse == nullptr, "check_gradients: layer \"{}\": parameter \"{}\" is on the sparse path; "
                     "hint: check the layer with its table dense", check.layer, p->name);
    LOOM_CHECK_INPUT(p->value.defined() && p->grad.defined(),
                     "check_gradients: layer \"{}\": parameter \"{}\" has no value or gradient; hint: allocate it "
                     "first (Model::initialise, or nn::initialise for one parameter)", check.layer, p->name);
    p->grad.zero_();
  }
  Saved saved;
  const at::Tensor y = layer.forward(x, mb, saved);
  const at::Tensor dx = layer.backward_input(dy, saved);
  layer.backward_weight(saved);
  check.released = saved.empty();

  const c10::AutoGradMode grad_mode(true);
  at::Tensor x_ref = x.detach().clone();
  const bool floating = x.is_floating_point();
  if (floating) x_ref.requires_grad_(true);
  std::vector<at::Tensor> leaves;
  for (Param* p : params) leaves.push_back(p->value.detach().clone().requires_grad_(true));
  const at::Tensor y_ref = reference(x_ref, leaves);
  if (dy.defined()) y_ref.backward(dy);
  else y_ref.backward();

  check.output = compared(check, "the output", y, y_ref.detach());
  if (floating) check.input = compared(check, "the input gradient", dx, x_ref.grad());
  for (size_t i = 0; i < params.size(); ++i)
    check.params.emplace_back(params[i]->name,
                              compared(check, fmt::format("the gradient of {}", params[i]->name), params[i]->grad,
                                       leaves[i].grad()));
  return check;
}

}  // namespace loom::nn

#pragma once
// A layer loom does not ship: a residual mixture of two experts with a soft router,
//   g = softmax(x Wr)                      [tokens, 2]
//   y = x + g0 * tanh(x A0) B0 + g1 * tanh(x A1) B1
// Every token goes through both experts, weighed by its router (dense routing: differentiable and
// deterministic, so every layout trains the same model). Its backward is written out by hand and
// split, as loom's layers are: backward_input returns dL/dx and keeps what the weight gradients
// need; backward_weight adds them to each parameter's gradient.
#include <loom/loom.h>

namespace custom {

class TwoExperts final : public loom::nn::Layer {
 public:
  // `prefix` names the layer and its parameters (prefix.router, prefix.experts.E.in/out).
  TwoExperts(std::string prefix, int64_t d_model, int64_t hidden);

  std::string name() const override { return prefix_; }
  at::Tensor forward(const at::Tensor& x, const loom::nn::MicroBatch& mb, loom::nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, loom::nn::Saved& saved) override;
  void backward_weight(loom::nn::Saved& saved) override;
  std::vector<loom::nn::Param*> params() override;
  loom::nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  // The same math in plain tensor operations, for the gradient check: the parameters in
  // params() order.
  static at::Tensor reference(const at::Tensor& x, const std::vector<at::Tensor>& params);

 private:
  std::string prefix_;
  int64_t d_model_, hidden_;
  loom::nn::Param router_;
  loom::nn::Param in_[2], out_[2];
};

}  // namespace custom

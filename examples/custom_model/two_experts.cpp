#include "two_experts.h"

namespace custom {
namespace {

using loom::nn::compute_value;

// x @ w (or x @ w^T), on the path the rank's bfloat16 products take (loom::nn::matmul).
at::Tensor product(const at::Tensor& x, const loom::nn::Param& w, bool transposed = false) {
  const at::Tensor& v = compute_value(w);
  return loom::nn::matmul(x, transposed ? v.t() : v, w.products);
}

// What backward needs of a forward, and what the weight gradients need of backward_input. Every
// tensor is visited, so that loom's memory policies can move them (NOTE [Memory policy]).
struct State : loom::nn::SavedState {
  at::Tensor x, gate, hidden[2], expert[2];   // forward's
  at::Tensor dlogits, dpre[2], dexpert[2];    // backward_input's, for backward_weight
  void for_each_tensor(const loom::nn::TensorVisitor& visit) override {
    visit("x", x), visit("gate", gate), visit("dlogits", dlogits);
    for (int e = 0; e < 2; ++e) {
      visit(e ? "hidden1" : "hidden0", hidden[e]), visit(e ? "expert1" : "expert0", expert[e]);
      visit(e ? "dpre1" : "dpre0", dpre[e]), visit(e ? "dexpert1" : "dexpert0", dexpert[e]);
    }
  }
};

loom::nn::Param matrix(std::string name, int64_t rows, int64_t cols, double std) {
  loom::nn::Param p;
  p.name = std::move(name);
  p.full_shape = {rows, cols};
  p.init = loom::nn::Init::Normal;
  p.init_std = std;
  p.weight_decay = true;
  return p;
}

// [..., n] as [rows, n], for the weight gradients' products.
at::Tensor rows(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

}  // namespace

TwoExperts::TwoExperts(std::string prefix, int64_t d_model, int64_t hidden)
    : prefix_(std::move(prefix)),
      d_model_(d_model),
      hidden_(hidden),
      router_(matrix(prefix_ + ".router", d_model, 2, 0.02)) {
  for (int e = 0; e < 2; ++e) {
    const std::string expert = prefix_ + ".experts." + std::to_string(e);
    in_[e] = matrix(expert + ".in", d_model, hidden, 0.02);
    out_[e] = matrix(expert + ".out", hidden, d_model, 0.02);
  }
}

at::Tensor TwoExperts::forward(const at::Tensor& x, const loom::nn::MicroBatch&, loom::nn::Saved& saved) {
  State& s = saved.emplace<State>();
  s.x = x;
  s.gate = at::softmax(product(x, router_), -1);
  at::Tensor y = x.clone();
  for (int e = 0; e < 2; ++e) {
    s.hidden[e] = at::tanh(product(x, in_[e]));
    s.expert[e] = product(s.hidden[e], out_[e]);
    y.add_(s.gate.narrow(-1, e, 1) * s.expert[e]);
  }
  return y;
}

at::Tensor TwoExperts::backward_input(const at::Tensor& dy, loom::nn::Saved& saved) {
  State& s = saved.get<State>();
  at::Tensor dx = dy.clone();
  at::Tensor dgate = at::empty_like(s.gate);
  for (int e = 0; e < 2; ++e) {
    dgate.narrow(-1, e, 1).copy_((dy * s.expert[e]).sum(-1, /*keepdim=*/true));
    s.dexpert[e] = dy * s.gate.narrow(-1, e, 1);
    const at::Tensor dhidden = product(s.dexpert[e], out_[e], true);
    s.dpre[e] = dhidden * (1 - s.hidden[e] * s.hidden[e]);
    dx.add_(product(s.dpre[e], in_[e], true));
    s.expert[e].reset();  // not needed by the weight gradients
  }
  // The softmax's backward: dlogits = g * (dg - sum(g * dg)).
  s.dlogits = s.gate * (dgate - (s.gate * dgate).sum(-1, /*keepdim=*/true));
  dx.add_(product(s.dlogits, router_, true));
  return dx;
}

void TwoExperts::backward_weight(loom::nn::Saved& saved) {
  State& s = saved.get<State>();
  const at::Tensor x = rows(s.x);
  loom::nn::add_product(router_.grad, x.t(), rows(s.dlogits), router_.products);
  for (int e = 0; e < 2; ++e) {
    loom::nn::add_product(in_[e].grad, x.t(), rows(s.dpre[e]), in_[e].products);
    loom::nn::add_product(out_[e].grad, rows(s.hidden[e]).t(), rows(s.dexpert[e]), out_[e].products);
  }
  saved.clear();
}

std::vector<loom::nn::Param*> TwoExperts::params() {
  return {&router_, &in_[0], &out_[0], &in_[1], &out_[1]};
}

loom::nn::Cost TwoExperts::cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const {
  const auto tokens = static_cast<double>(batch * seq), d = static_cast<double>(d_model_), h = static_cast<double>(hidden_);
  const double products = 2 * tokens * (2 * d + 2 * (2 * d * h));  // router, and each expert's two GEMMs
  loom::nn::Cost c;
  c.forward_flops = products;
  c.backward_input_flops = products;
  c.backward_weight_flops = products;
  // x, the gate, and per expert its hidden and output activations.
  c.saved_bytes = tokens * (d + 2 + 2 * (h + d)) * static_cast<double>(dtype_bytes);
  c.param_bytes = (2 * d + 2 * 2 * d * h) * static_cast<double>(dtype_bytes);
  c.gemm_dim = std::min(d, h);
  c.elementwise_bytes = tokens * 2 * (h + 2 * d) * static_cast<double>(dtype_bytes);
  return c;
}

at::Tensor TwoExperts::reference(const at::Tensor& x, const std::vector<at::Tensor>& p) {
  const at::Tensor gate = at::softmax(at::matmul(x, p[0]), -1);
  at::Tensor y = x;
  for (int e = 0; e < 2; ++e) y = y + gate.narrow(-1, e, 1) * at::matmul(at::tanh(at::matmul(x, p[1 + 2 * e])), p[2 + 2 * e]);
  return y;
}

}  // namespace custom

#pragma once
// LM head fused with cross-entropy: loss = loss_scale * sum_t (logsumexp(z_t) - z_t[target_t]),
// z = x W^T (untied, no bias). Forward computes the loss and, over the same buffer, the logits'
// gradient (softmax - onehot); only that is kept (the loss scale is applied in backward's GEMMs),
// so the logits and the probabilities never coexist. The chain's last layer: forward returns the 0-d loss, and
// backward_input ignores dy (the loss is the root of backward).
#include "loom/nn/layer.h"
#include "loom/nn/linear.h"

namespace loom::nn {

class LmHeadLoss final : public Layer {
 public:
  LmHeadLoss(int64_t d_model, int64_t vocab);

  std::string name() const override { return "head_loss"; }
  at::Tensor forward(const at::Tensor& x, const MicroBatch& mb, Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, Saved& saved) override;
  void backward_weight(Saved& saved) override;
  std::vector<Param*> params() override { return head.params(); }
  Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  Linear head;  // d_model -> vocab, no bias

 private:
  int64_t d_model_, vocab_;
};

}  // namespace loom::nn

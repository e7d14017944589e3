#pragma once
// The layers of a DLRM-style recommendation model (models/dlrm.h):
//   Dense          y = relu(x W^T + b); the chain's first one reads the micro-batch's dense
//                  features instead of its input (the token ids)
//   EmbeddingBags  y = [x, bag_0, ..., bag_{T-1}]: each categorical feature's bag is the sum of
//                  its rows of that feature's table (the "cat" interaction)
//   ClickLoss      logit = x w^T + b; binary cross-entropy with the click label
// Each keeps what its backward needs in Saved and splits backward into input and weight parts.
#include "loom/nn/layer.h"

namespace loom::blocks {

class Dense final : public nn::Layer {
 public:
  // `reads_features`: the chain's first layer, fed by MicroBatch::dense.
  Dense(std::string name, int64_t in, int64_t out, bool reads_features);

  std::string name() const override { return name_; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override { return {&weight, &bias}; }
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  nn::Param weight;  // [out, in]
  nn::Param bias;    // [out]

 private:
  std::string name_;
  int64_t in_, out_;
  bool reads_features_;
};

class EmbeddingBags final : public nn::Layer {
 public:
  EmbeddingBags(int64_t tables, int64_t rows, int64_t width, int64_t bag_size);

  std::string name() const override { return "bags"; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override;
  void pull_rows(const std::vector<nn::MicroBatch>& microbatches) override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  std::vector<nn::Param> tables;  // "bags.F.weight" [rows, width]

 private:
  at::Tensor ids_of(const nn::MicroBatch& mb, size_t table) const;  // [batch * bag_size]
  int64_t rows_, width_, bag_;
};

class ClickLoss final : public nn::Layer {
 public:
  explicit ClickLoss(int64_t in);

  std::string name() const override { return "click_loss"; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override;
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override;
  void backward_weight(nn::Saved& saved) override;
  std::vector<nn::Param*> params() override { return {&weight, &bias}; }
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;

  nn::Param weight;  // [1, in]
  nn::Param bias;    // [1]

 private:
  int64_t in_;
};

}  // namespace loom::blocks

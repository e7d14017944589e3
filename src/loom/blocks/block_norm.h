#pragma once
// The norm a layer applies to its input: LayerNorm (GPT) or RMSNorm (Llama) behind one face, for
// the pre-norm sub-blocks and the final norm. Forward keeps the input and its statistics in a
// NormState; backward computes dx and the parameter gradients in one pass and keeps the latter
// until the owner's backward_weight hands them to `accumulate`.
#include <optional>

#include "loom/nn/layer.h"
#include "loom/nn/layer_norm.h"
#include "loom/nn/rms_norm.h"

namespace loom::blocks {

enum class NormKind { Layer, Rms };

struct NormState {
  at::Tensor x, mean, rstd;  // input and statistics (mean: LayerNorm only); freed by backward
  at::Tensor dgain, dbias;   // parameter gradients from backward (dbias: LayerNorm only)
  void for_each_tensor(const nn::TensorVisitor& visit);
};

class BlockNorm {
 public:
  // `sequence_sharded`: it sees this tp rank's tokens only (tp_sequence), so its parameter
  // gradients are partial over tp.
  BlockNorm(NormKind kind, const std::string& name, int64_t dim, bool sequence_sharded);

  at::Tensor forward(const at::Tensor& x, NormState& s) const;
  at::Tensor backward(const at::Tensor& dy, NormState& s) const;  // dx; frees x and the statistics
  void accumulate(NormState& s);  // adds the parameter gradients and frees them
  std::vector<nn::Param*> params();
  // Elements kept from forward for `rows` tokens: x and its statistics (one or two per token).
  int64_t saved_elements(int64_t rows) const;
  int64_t param_elements() const;  // the gain (and LayerNorm's bias)

 private:
  std::optional<nn::LayerNorm> layer_;
  std::optional<nn::RmsNorm> rms_;
  int64_t dim_;
};

}  // namespace loom::blocks

#include "loom/nn/layer.h"

#include <algorithm>

namespace loom::nn {

Cost& Cost::operator+=(const Cost& o) {
  forward_flops += o.forward_flops;
  backward_input_flops += o.backward_input_flops;
  backward_weight_flops += o.backward_weight_flops;
  saved_bytes += o.saved_bytes;
  param_bytes += o.param_bytes;
  workspace_bytes = std::max(workspace_bytes, o.workspace_bytes);  // one layer's at a time
  attention_flops += o.attention_flops;
  gemm_dim = std::max(gemm_dim, o.gemm_dim);
  elementwise_bytes += o.elementwise_bytes;
  score_bytes += o.score_bytes;
  fusable_bytes += o.fusable_bytes;
  comm.insert(comm.end(), o.comm.begin(), o.comm.end());
  return *this;
}

}  // namespace loom::nn

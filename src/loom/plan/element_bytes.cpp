#include "loom/plan/element_bytes.h"

#include "loom/nn/precision.h"

namespace loom::plan {

int64_t master_bytes(const ModelConfig& m) { return static_cast<int64_t>(at::elementSize(nn::master_type(m.dtype))); }

int64_t activation_bytes(const ModelConfig& m) {
  return static_cast<int64_t>(at::elementSize(nn::activation_type(m.dtype)));
}

int64_t compute_copy_bytes(const ModelConfig& m) { return m.dtype == DType::BFloat16 ? activation_bytes(m) : 0; }

int64_t grad_wire_bytes(const Config& c) {
  return c.parallel.grad_dtype == GradDType::BFloat16 ? 2 : master_bytes(c.model);
}

}  // namespace loom::plan

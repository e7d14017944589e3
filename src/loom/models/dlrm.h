#pragma once
// A DLRM-style click model as the chain
//   bottom MLP (dense features -> bottom_mlp... -> d_model), embedding bags (one per categorical
//   feature, concatenated after the bottom output: the interaction), top MLP (top_mlp...),
//   logit + binary cross-entropy.
// Its tables are the embedding-like parameters Parallax's sparse path is for.
#include "loom/core/config.h"
#include "loom/models/model.h"
#include "loom/models/registry.h"

namespace loom::models {

Model build_dlrm(const ModelConfig& config);

// model.kind = "dlrm" (registry.h): data parallelism only, its tables on the sparse path.
const ModelKind& dlrm_kind();

}  // namespace loom::models

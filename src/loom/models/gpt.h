#pragma once
// GPT (pre-LayerNorm, learned positions, GELU-tanh MLP, untied head) as the chain
//   embedding, [attention sub-block, MLP sub-block] x n_layers, final_norm, head_loss.
#include "loom/core/config.h"
#include "loom/models/model.h"

namespace loom::models {

// Layers only; call Model::initialise to allocate and fill the parameters.
Model build_gpt(const ModelConfig& config);

}  // namespace loom::models

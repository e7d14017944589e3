#pragma once
// A model is a flat chain of layers (nn/chain.h), built by its kind (models/registry.h).
#include "loom/nn/chain.h"

namespace loom::models {

using Model = nn::Chain;

}  // namespace loom::models

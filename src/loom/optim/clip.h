#pragma once
// Global gradient-norm clipping: if ||g|| over all params exceeds max_norm, every gradient is
// scaled by max_norm / (||g|| + 1e-6). Returns the norm before clipping. max_norm <= 0 only measures.
#include <vector>

#include "loom/nn/param.h"

namespace loom::optim {

double global_grad_norm(const std::vector<nn::Param*>& params);
double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm);

}  // namespace loom::optim

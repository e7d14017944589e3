#pragma once
// The mixture-of-experts keys of a decoder (model.moe_*, NOTE [Mixture-of-experts block]): which
// blocks route over experts, their shape, and the checks of the keys and of the layouts they run
// in.
#include "loom/blocks/moe_block.h"
#include "loom/core/config.h"

namespace loom::models {

// Whether block `block` (0-based) has experts in place of its MLP: every moe_every-th one.
bool is_moe_block(const ModelConfig& m, int64_t block);
// The experts' shape in block `block` of a decoder whose dense MLP is `dense_hidden` wide and
// whose sub-blocks normalise with `norm` (the experts are SwiGLU MLPs in either kind).
blocks::MoeShape moe_shape(const ModelConfig& m, int64_t block, int64_t dense_hidden, double residual_std,
                           blocks::NormKind norm = blocks::NormKind::Rms);
// The blocks with experts, in order (their rows in the step's measures).
int64_t moe_blocks(const ModelConfig& m);
// Throws InputError for a bad model.moe_* value or a layout the experts do not run in yet.
void check_moe(const Config& config, int64_t dense_hidden);

}  // namespace loom::models

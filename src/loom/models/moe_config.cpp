#include "loom/models/moe_config.h"

#include <cmath>

#include "loom/core/checks.h"
#include "loom/core/error.h"

namespace loom::models {

bool is_moe_block(const ModelConfig& m, int64_t block) {
  return m.moe_experts > 0 && (block + 1) % m.moe_every == 0;
}

int64_t moe_blocks(const ModelConfig& m) { return m.moe_experts > 0 ? m.n_layers / m.moe_every : 0; }

blocks::MoeShape moe_shape(const ModelConfig& m, int64_t block, int64_t dense_hidden, double residual_std,
                           blocks::NormKind norm) {
  return {.block = block,
          .d_model = m.d_model,
          .hidden = m.moe_ffn_hidden > 0 ? m.moe_ffn_hidden : dense_hidden,
          .shared = m.moe_shared_experts,
          .router = {.experts = m.moe_experts, .top_k = m.moe_top_k, .score = m.moe_score,
                     .capacity_factor = m.moe_capacity_factor},
          .aux_coef = m.moe_aux_loss_coef,
          .balance = m.moe_balance,
          .bias_rate = m.moe_bias_rate,
          .norm = norm,
          .residual_std = residual_std};
}

void check_moe(const Config& config, int64_t dense_hidden) {
  const ModelConfig& m = config.model;
  const ParallelConfig& p = config.parallel;
  LOOM_CHECK_INPUT(m.moe_experts >= 0, "model.moe_experts = {} must be >= 0 (0 = a dense MLP in every block)",
                   m.moe_experts);
  if (m.moe_experts == 0) return;
  LOOM_CHECK_INPUT(m.moe_top_k >= 1 && m.moe_top_k <= m.moe_experts,
                   "model.moe_top_k = {} must be between 1 and model.moe_experts = {}: each token goes to k of the "
                   "experts",
                   m.moe_top_k, m.moe_experts);
  LOOM_CHECK_INPUT(m.moe_every >= 1 && m.moe_every <= m.n_layers,
                   "model.moe_every = {} must be between 1 and model.n_layers = {} (1: experts in every block, 2: in "
                   "every second one, ...)",
                   m.moe_every, m.n_layers);
  LOOM_CHECK_INPUT(m.moe_shared_experts >= 0, "model.moe_shared_experts = {} must be >= 0", m.moe_shared_experts);
  LOOM_CHECK_INPUT(m.moe_ffn_hidden >= 0, "model.moe_ffn_hidden = {} must be >= 0 (0 = the dense MLP's width)",
                   m.moe_ffn_hidden);
  LOOM_CHECK_INPUT(std::isfinite(m.moe_capacity_factor) && m.moe_capacity_factor >= 0,
                   "model.moe_capacity_factor = {} must be a finite number >= 0 (0 = dropless; c > 0 lets an expert "
                   "take ceil(c x tokens x moe_top_k / moe_experts) of a micro-batch's tokens)",
                   m.moe_capacity_factor);
  LOOM_CHECK_INPUT(std::isfinite(m.moe_aux_loss_coef) && m.moe_aux_loss_coef >= 0,
                   "model.moe_aux_loss_coef = {} must be a finite number >= 0 (0 = no balance loss)",
                   m.moe_aux_loss_coef);
  LOOM_CHECK_INPUT(m.moe_balance != MoeBalance::Bias || (std::isfinite(m.moe_bias_rate) && m.moe_bias_rate > 0),
                   "model.moe_bias_rate = {} must be a finite number > 0 with model.moe_balance = \"bias\" (the "
                   "step each expert's choice bias moves by after every step; 0.001 is usual)",
                   m.moe_bias_rate);
  const int64_t hidden = m.moe_ffn_hidden > 0 ? m.moe_ffn_hidden : dense_hidden;
  check_product("the experts' weights",
                {{"model.moe_experts", m.moe_experts}, {"3 matrices", 3}, {"model.d_model", m.d_model},
                 {m.moe_ffn_hidden > 0 ? "model.moe_ffn_hidden" : "the MLP's width", hidden}});
  LOOM_CHECK_INPUT(m.moe_experts % p.ep == 0,
                   "model.moe_experts = {} must be a multiple of parallel.ep = {}: each rank of an expert group holds "
                   "moe_experts / ep of them",
                   m.moe_experts, p.ep);
  // NOTE [Experts over tensor parallelism]: a micro-batch is routed whole, so not in tp_overlap's pieces.
  LOOM_CHECK_INPUT(p.tp == 1 || p.tp_overlap == 1,
                   "model.moe_experts = {} routes each micro-batch whole, which parallel.tp_overlap = {} cuts into "
                   "pieces; hint: parallel.tp_overlap = 1 with experts",
                   m.moe_experts, p.tp_overlap);
  LOOM_CHECK_INPUT(m.moe_shared_experts * hidden % p.tp == 0,
                   "the shared experts' width model.moe_shared_experts x {} = {} must be a multiple of parallel.tp = {} "
                   "(it is split over tp as the MLP's is)",
                   hidden, m.moe_shared_experts * hidden, p.tp);
}

}  // namespace loom::models

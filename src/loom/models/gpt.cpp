#include "loom/models/gpt.h"

#include <fmt/format.h>

#include <cmath>

#include "loom/nn/attention_block.h"
#include "loom/nn/embedding.h"
#include "loom/nn/final_norm.h"
#include "loom/nn/lm_head_loss.h"
#include "loom/nn/mlp_block.h"

namespace loom::models {

Model build_gpt(const ModelConfig& m, dist::Communicator& tp, parallel::TpOptions options, parallel::SpOptions sp) {
  const bool sequence = options.sequence && tp.size() > 1;
  const int64_t positions = m.max_positions > 0 ? m.max_positions : m.seq_len;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.n_layers));
  Model model;
  model.chain.push_back(std::make_unique<nn::TokenPositionEmbedding>(m.vocab, positions, m.d_model, tp, sequence,
                                                                        parallel::sequence_chunks(sp)));
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string prefix = fmt::format("blocks.{}", i);
    model.chain.push_back(
        std::make_unique<nn::AttentionBlock>(prefix + ".attn", m.d_model, m.n_heads, m.attn_tile, residual_std, tp,
                                             options, sp));
    model.chain.push_back(
        std::make_unique<nn::MlpBlock>(prefix + ".mlp", m.d_model, m.ffn_mult * m.d_model, residual_std, tp,
                                       options));
  }
  model.chain.push_back(std::make_unique<nn::FinalNorm>(m.d_model, sequence ? tp.size() : 1));
  model.chain.push_back(std::make_unique<nn::LmHeadLoss>(m.d_model, m.vocab, tp, sequence));
  return model;
}

}  // namespace loom::models

#include "loom/models/gpt.h"

#include <fmt/format.h>

#include <cmath>

#include "loom/blocks/attention_block.h"
#include "loom/core/error.h"
#include "loom/models/decoder_kind.h"
#include "loom/models/moe_config.h"
#include "loom/models/transformer_config.h"
#include "loom/blocks/embedding.h"
#include "loom/nn/precision.h"
#include "loom/blocks/final_norm.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/blocks/mlp_block.h"

namespace loom::models {

Model build_gpt(const ModelConfig& m, dist::Communicator& tp, parallel::TpOptions options, parallel::SpOptions sp,
                dist::Communicator* ep) {
  const bool sequence = options.sequence && tp.size() > 1;
  const int64_t positions = m.max_positions > 0 ? m.max_positions : m.seq_len;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.n_layers));
  Model model;
  auto embedding = std::make_unique<blocks::TokenPositionEmbedding>(m.vocab, positions, m.d_model, tp, sequence,
                                                                    parallel::sequence_chunks(sp),
                                                                    nn::activation_type(m.dtype));
  nn::Param* tied = nullptr;
  if (m.tie_embeddings) {  // GPT-2's head: the token table (dense, as Llama's tied one)
    embedding->token_table.embedding = false;
    tied = &embedding->token_table;
  }
  model.chain.push_back(std::move(embedding));
  const blocks::AttentionShape attention{.d_model = m.d_model, .n_heads = m.n_heads, .kernel = attention_kernel(m),
                                         .residual_std = residual_std};
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string prefix = fmt::format("blocks.{}", i);
    model.chain.push_back(
        std::make_unique<blocks::AttentionBlock>(prefix + ".attn", attention, tp, options, sp));
    const int64_t hidden = m.ffn_mult * m.d_model;
    if (is_moe_block(m, i))
      model.chain.push_back(std::make_unique<blocks::MoeBlock>(
          prefix + ".moe", moe_shape(m, i, hidden, residual_std, blocks::NormKind::Layer), tp, options, ep, sp));
    else
      model.chain.push_back(std::make_unique<blocks::MlpBlock>(
          prefix + ".mlp", blocks::MlpShape{.d_model = m.d_model, .hidden = hidden, .residual_std = residual_std}, tp,
          options));
  }
  model.chain.push_back(std::make_unique<blocks::FinalNorm>(m.d_model, sequence ? tp.size() : 1));
  model.chain.push_back(std::make_unique<blocks::LmHeadLoss>(m.d_model, m.vocab, tp, sequence, tied));
  return model;
}

namespace {

// The Llama keys have no meaning for a GPT: only their neutral values are accepted.
void refuse_llama_keys(const ModelConfig& m) {
  const ModelConfig neutral;
  for (auto [key, set] : {std::pair{"model.n_kv_heads", m.n_kv_heads != neutral.n_kv_heads},
                          {"model.rope_theta", m.rope_theta != neutral.rope_theta},
                          {"model.ffn_multiple_of", m.ffn_multiple_of != neutral.ffn_multiple_of}})
    LOOM_CHECK_INPUT(!set, "{} applies to model.kind = \"llama\"; a \"gpt\" leaves it at its default", key);
}

class GptKind final : public DecoderKind {
 public:
  std::string_view name() const override { return "gpt"; }
  std::vector<std::string_view> model_keys() const override {
    return {"kind",     "vocab",     "d_model", "n_layers", "n_heads",    "seq_len",
            "max_positions", "ffn_mult", "attn_tile", "dtype", "tie_embeddings", "moe_experts"};
  }
  void validate(const Config& config) const override {
    const ModelConfig& m = config.model;
    refuse_llama_keys(m);
    check_tied_head(m, config.parallel);
    validate_transformer(config, {.mlp_hidden = m.ffn_mult * m.d_model,
                                  .hidden_keys = {{"model.ffn_mult", m.ffn_mult}, {"model.d_model", m.d_model}},
                                  .kv_heads = m.n_heads,
                                  .learned_positions = true});
    check_moe(config, m.ffn_mult * m.d_model);
  }
  Model build(const ModelConfig& config, const Parallelism& p) const override {
    return build_gpt(config, p.tp, p.tp_options, p.sp, p.ep);
  }
};

}  // namespace

const ModelKind& gpt_kind() {
  static const GptKind kind;
  return kind;
}

}  // namespace loom::models

#include "loom/models/llama.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "loom/blocks/embedding.h"
#include "loom/nn/precision.h"
#include "loom/blocks/final_norm.h"
#include "loom/blocks/attention_block.h"
#include "loom/blocks/mlp_block.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/core/checks.h"
#include "loom/core/error.h"
#include "loom/models/decoder_kind.h"
#include "loom/models/moe_config.h"
#include "loom/models/transformer_config.h"
#include "loom/nn/swiglu.h"

namespace loom::models {

int64_t kv_heads(const ModelConfig& m) { return m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads; }

Model build_llama(const ModelConfig& m, dist::Communicator& tp, parallel::TpOptions options, parallel::SpOptions sp,
                  dist::Communicator* ep) {
  const bool sequence = options.sequence && tp.size() > 1;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.n_layers));
  Model model;
  auto embedding = std::make_unique<blocks::TokenPositionEmbedding>(m.vocab, /*positions=*/0, m.d_model, tp, sequence,
                                                                    parallel::sequence_chunks(sp),
      nn::activation_type(m.dtype));
  nn::Param* tied = nullptr;
  if (m.tie_embeddings) {
    // The head reads every row of a tied table each step, so the table stays dense: never on the
    // sparse path (NOTE [Sparse exchange]), whatever parallel.sparse says.
    embedding->token_table.embedding = false;
    tied = &embedding->token_table;
  }
  model.chain.push_back(std::move(embedding));
  const blocks::AttentionShape attention{.d_model = m.d_model, .n_heads = m.n_heads, .n_kv_heads = kv_heads(m),
                                         .kernel = attention_kernel(m), .norm = blocks::NormKind::Rms, .bias = false,
                                         .fused_qkv = false, .rope_theta = m.rope_theta, .residual_std = residual_std};
  const blocks::MlpShape mlp{.d_model = m.d_model, .hidden = nn::swiglu_hidden(m.d_model, m.ffn_mult, m.ffn_multiple_of),
                             .activation = blocks::MlpActivation::SwiGlu, .norm = blocks::NormKind::Rms,
                             .bias = false, .residual_std = residual_std};
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string prefix = fmt::format("blocks.{}", i);
    model.chain.push_back(std::make_unique<blocks::AttentionBlock>(prefix + ".attn", attention, tp, options, sp));
    if (is_moe_block(m, i))
      model.chain.push_back(std::make_unique<blocks::MoeBlock>(prefix + ".moe", moe_shape(m, i, mlp.hidden, residual_std), tp,
                                                               options, ep, sp));
    else
      model.chain.push_back(std::make_unique<blocks::MlpBlock>(prefix + ".mlp", mlp, tp, options));
  }
  model.chain.push_back(std::make_unique<blocks::FinalNorm>(m.d_model, sequence ? tp.size() : 1, blocks::NormKind::Rms));
  model.chain.push_back(std::make_unique<blocks::LmHeadLoss>(m.d_model, m.vocab, tp, sequence, tied));
  return model;
}

namespace {

// The Llama keys themselves, before anything is computed from them.
void check_llama_keys(const ModelConfig& m) {
  LOOM_CHECK_INPUT(m.max_positions == 0,
                   "model.max_positions = {} sizes a learned position table, which model.kind = \"llama\" does not "
                   "have (its positions are rotary, applied in attention); hint: leave max_positions at 0",
                   m.max_positions);
  LOOM_CHECK_INPUT(m.n_kv_heads >= 0, "model.n_kv_heads = {} must be >= 0 (0 = model.n_heads)", m.n_kv_heads);
  LOOM_CHECK_INPUT(std::isfinite(m.rope_theta) && m.rope_theta > 1,
                   "model.rope_theta = {} must be a finite number above 1 (the rotary base; 10000 by default)",
                   m.rope_theta);
  check_positive("model.ffn_multiple_of", m.ffn_multiple_of);
  check_product("model.ffn_multiple_of", {{"model.ffn_multiple_of", m.ffn_multiple_of}});
}

// The SwiGLU width, or 0 while the keys it is made of are invalid (validate_transformer refuses
// them before it uses the width).
int64_t checked_hidden(const ModelConfig& m) {
  if (m.d_model <= 0 || m.ffn_mult <= 0 || m.ffn_mult > kMaxCount / m.d_model) return 0;
  return nn::swiglu_hidden(m.d_model, m.ffn_mult, m.ffn_multiple_of);
}

// Grouped heads, rotary pairs and a tied head's placement, once the sizes are known to be sane.
void check_llama_layout(const ModelConfig& m, const ParallelConfig& p) {
  const int64_t kv = kv_heads(m);
  LOOM_CHECK_INPUT(m.n_heads % kv == 0,
                   "model.n_heads ({}) must be a multiple of model.n_kv_heads ({}): each key/value head serves an "
                   "equal group of query heads; hint: n_kv_heads = {} fits",
                   m.n_heads, kv, std::gcd(m.n_heads, kv));
  const int64_t head_dim = m.d_model / m.n_heads;
  LOOM_CHECK_INPUT(head_dim % 2 == 0,
                   "model.d_model / model.n_heads = {} / {} = {} must be even: rotary embeddings rotate pairs of a "
                   "head's dimensions",
                   m.d_model, m.n_heads, head_dim);
  check_tied_head(m, p);
}

class LlamaKind final : public DecoderKind {
 public:
  std::string_view name() const override { return "llama"; }
  std::vector<std::string_view> model_keys() const override {
    return {"kind", "vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "seq_len", "ffn_mult",
            "ffn_multiple_of", "attn_tile", "dtype", "tie_embeddings", "rope_theta", "moe_experts"};
  }
  void validate(const Config& config) const override {
    const ModelConfig& m = config.model;
    check_llama_keys(m);
    validate_transformer(config, {.mlp_hidden = checked_hidden(m),
                                  .hidden_keys = {{"model.ffn_mult", m.ffn_mult}, {"model.d_model", m.d_model}},
                                  .kv_heads = kv_heads(m),
                                  .learned_positions = false});
    check_llama_layout(m, config.parallel);
    check_moe(config, checked_hidden(m));
  }
  Model build(const ModelConfig& config, const Parallelism& p) const override {
    return build_llama(config, p.tp, p.tp_options, p.sp, p.ep);
  }
};

}  // namespace

const ModelKind& llama_kind() {
  static const LlamaKind kind;
  return kind;
}

}  // namespace loom::models

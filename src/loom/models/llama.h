#pragma once
// Llama as the chain
//   embedding (token table only), [attention sub-block, MLP sub-block] x n_layers, final_norm,
//   head_loss
// with RMSNorm (eps 1e-5) before each sub-block and at the end, rotary position embeddings on q and
// k (base model.rope_theta) instead of a position table, grouped-query attention
// (model.n_kv_heads), a SwiGLU MLP of width nn::swiglu_hidden(d_model, ffn_mult, ffn_multiple_of),
// no biases, and optionally the token table as the LM head (model.tie_embeddings).
//
// Parameter names follow the GPT's scheme: embedding.wte; blocks.i.attn.{norm, q, kv, proj}.weight
// (kv is [2, n_kv_heads x head_dim, d_model]: k then v); blocks.i.mlp.{norm, gate_up, down}.weight
// (gate_up is [2, hidden, d_model]: gate then up); final_norm.weight; head.weight (absent when
// tied). Parallelism as the GPT's (models/gpt.h); a tied head needs pp = 1.
#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/models/registry.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/parallel/tp_region.h"

namespace loom::models {

// Layers only; call Model::initialise to allocate and fill the parameters.
// `ep`: the expert group (NOTE [Expert parallelism]); null: every expert on this rank.
Model build_llama(const ModelConfig& config, dist::Communicator& tp, parallel::TpOptions options = {},
                  parallel::SpOptions sp = {}, dist::Communicator* ep = nullptr);

// The key/value heads of a config (model.n_kv_heads, 0 = n_heads).
int64_t kv_heads(const ModelConfig& config);

// model.kind = "llama" (registry.h).
const ModelKind& llama_kind();

}  // namespace loom::models

#pragma once
// The config checks every decoder-only transformer kind shares (gpt, llama): its keys, the sizes
// of its tensors (NOTE [Sizes that fit]), the layouts its blocks support (tp, sp, pipeline
// chunks) and its data sources. Each kind adds its own on top.
#include "loom/core/checks.h"
#include "loom/core/config.h"
#include "loom/nn/attention.h"

namespace loom::models {

struct TransformerShape {
  int64_t mlp_hidden = 0;          // the MLP's hidden width (tp shards it)
  std::vector<Factor> hidden_keys; // the keys whose product it is, for size errors
  int64_t kv_heads = 0;            // key/value heads (tp shards them; = n_heads without GQA)
  bool learned_positions = false;  // a position table of model.max_positions rows
};

void validate_transformer(const Config& config, const TransformerShape& shape);

// model.tie_embeddings shares the token table with the head: one pipeline rank must hold both.
void check_tied_head(const ModelConfig& m, const ParallelConfig& p);

// The attention kernel the model's blocks compute with: model.attn_kernel, model.attn_tile.
nn::AttentionKernel attention_kernel(const ModelConfig& m);

}  // namespace loom::models

#include "loom/models/transformer_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "loom/core/checks.h"
#include "loom/core/error.h"
#include "loom/models/registry.h"

namespace loom::models {
namespace {

void check_keys(const ModelConfig& m, const TransformerShape& shape, int64_t positions) {
  LOOM_CHECK_INPUT(m.vocab >= 2, "model.vocab = {} must be at least 2", m.vocab);
  for (auto [key, value] : {std::pair{"model.d_model", m.d_model}, {"model.n_layers", m.n_layers},
                            {"model.n_heads", m.n_heads}, {"model.seq_len", m.seq_len},
                            {"model.ffn_mult", m.ffn_mult}, {"model.attn_tile", m.attn_tile}})
    check_positive(key, value);
  LOOM_CHECK_INPUT(m.d_model % m.n_heads == 0,
                   "model.d_model ({}) must be divisible by model.n_heads ({}); hint: d_model = {} or {} fits",
                   m.d_model, m.n_heads, std::max(m.n_heads, m.d_model / m.n_heads * m.n_heads),
                   (m.d_model / m.n_heads + 1) * m.n_heads);
  if (!shape.learned_positions) return;
  LOOM_CHECK_INPUT(m.max_positions >= 0, "model.max_positions = {} must be >= 0 (0 = seq_len)", m.max_positions);
  LOOM_CHECK_INPUT(m.seq_len <= positions,
                   "model.seq_len ({}) is longer than the position table (model.max_positions = {}); "
                   "hint: raise max_positions or shorten seq_len",
                   m.seq_len, positions);
}

// The largest tensors of one micro-batch and of the model.
void check_sizes(const Config& c, const TransformerShape& shape) {
  const ModelConfig& m = c.model;
  const Factor d_model{"model.d_model", m.d_model}, micro_batch{"train.micro_batch", c.train.micro_batch};
  const Factor vocab{"model.vocab", m.vocab}, seq_len{"model.seq_len", m.seq_len};
  auto with = [](std::vector<Factor> factors, const std::vector<Factor>& more) {
    factors.insert(factors.end(), more.begin(), more.end());
    return factors;
  };
  check_product("the token table", {vocab, d_model});
  if (shape.learned_positions)
    check_product("the position table",
                  {{m.max_positions > 0 ? "model.max_positions" : "model.seq_len", c.position_count()}, d_model});
  check_product("the MLP weights of all blocks", with({{"model.n_layers", m.n_layers}}, with(shape.hidden_keys, {d_model})));
  check_product("a micro-batch's logits", {micro_batch, seq_len, vocab});
  check_product("a micro-batch's MLP activations", with({micro_batch, seq_len}, shape.hidden_keys));
  check_product("a micro-batch's attention scores tile",
                {micro_batch, {"model.n_heads", m.n_heads}, seq_len, {"model.attn_tile", m.attn_tile}});
}

void check_sequence_layout(const ModelConfig& m, const ParallelConfig& p) {
  LOOM_CHECK_INPUT(p.sp == 1 || p.sp_mode != SpMode::Ring || m.seq_len % (2 * p.sp) == 0,
                   "[sp] sp_mode = \"ring\" cuts the sequence into 2 x parallel.sp chunks (each rank holds one early "
                   "and one late, to balance the causal work): model.seq_len ({}) must be divisible by {}",
                   m.seq_len, 2 * p.sp);
  LOOM_CHECK_INPUT(m.seq_len % p.sp == 0,
                   "[sp] model.seq_len ({}) must be divisible by parallel.sp ({}): each sp rank holds one equal "
                   "segment of every sequence",
                   m.seq_len, p.sp);
  LOOM_CHECK_INPUT(p.sp == 1 || !p.tp_sequence || m.seq_len / p.sp % p.tp == 0,
                   "[tp] parallel.tp_sequence needs each sp segment (model.seq_len {} / parallel.sp {}) divisible by "
                   "parallel.tp ({})",
                   m.seq_len, p.sp, p.tp);
  LOOM_CHECK_INPUT(!p.tp_sequence || m.seq_len % p.tp == 0,
                   "[tp] parallel.tp_sequence needs model.seq_len ({}) divisible by parallel.tp ({}): each tp rank "
                   "holds seq_len / tp tokens of the norm regions; hint: change seq_len or turn tp_sequence off",
                   m.seq_len, p.tp);
}

void check_head_layout(const ModelConfig& m, const TransformerShape& shape, const ParallelConfig& p) {
  LOOM_CHECK_INPUT(m.n_heads % p.tp == 0, "[tp] model.n_heads ({}) must be divisible by parallel.tp ({})", m.n_heads,
                   p.tp);
  LOOM_CHECK_INPUT(shape.kv_heads % p.tp == 0,
                   "[tp] model.n_kv_heads ({}) must be divisible by parallel.tp ({}): each tp rank holds whole "
                   "key/value heads; hint: n_kv_heads = {} fits",
                   shape.kv_heads, p.tp, std::max<int64_t>(p.tp, shape.kv_heads / p.tp * p.tp));
  LOOM_CHECK_INPUT(p.sp == 1 || p.sp_mode != SpMode::Ulysses || shape.kv_heads % (p.tp * p.sp) == 0,
                   "[sp] sp_mode = \"ulysses\" splits the heads over sp: model.n_heads ({}){} must be divisible by "
                   "parallel.tp x parallel.sp ({} x {}); hint: sp_mode = \"allgather\" has no such limit",
                   m.n_heads,
                   shape.kv_heads == m.n_heads ? "" : fmt::format(" and model.n_kv_heads ({})", shape.kv_heads),
                   p.tp, p.sp);
  LOOM_CHECK_INPUT(shape.mlp_hidden % p.tp == 0,
                   "[tp] the MLP's hidden width ({}) must be divisible by parallel.tp ({}); see model.ffn_mult in "
                   "docs/config.md",
                   shape.mlp_hidden, p.tp);
}

void check_data(const DataConfig& d, const ModelConfig& m) {
  const std::string& s = d.source;
  const bool known = s == "synthetic" || (s.starts_with("text:") && s.size() > 5) ||
                     (s.starts_with("tokens:") && s.size() > 7);
  LOOM_CHECK_INPUT(known, "data.source = \"{}\" is not \"synthetic\", \"text:PATH\" or \"tokens:PATH\"", s);
  LOOM_CHECK_INPUT(!s.starts_with("text:") || m.vocab >= 256,
                   "data.source = \"{}\" is byte-level text, which needs model.vocab >= 256 (got {})", s, m.vocab);
}

}  // namespace

void validate_transformer(const Config& c, const TransformerShape& shape) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  check_keys(m, shape, c.position_count());
  check_sizes(c, shape);
  check_sparse_partitions(p, (m.vocab + p.tp - 1) / p.tp, "the token table (per tp rank)");
  check_sequence_layout(m, p);
  check_head_layout(m, shape, p);
  LOOM_CHECK_INPUT(p.chunks == 1 || !p.pp_cuts.empty() || m.n_layers % p.chunks == 0,
                   "parallel.chunks = {} must divide model.n_layers ({}) so that every chunk holds whole "
                   "transformer blocks' worth of layers; hint: change chunks or give parallel.pp_cuts",
                   p.chunks, m.n_layers);
  check_data(c.data, m);
}

nn::AttentionKernel attention_kernel(const ModelConfig& m) {
  return {.kind = m.attn_kernel, .tile = m.attn_tile, .products = m.bf16_products};
}

void check_tied_head(const ModelConfig& m, const ParallelConfig& p) {
  LOOM_CHECK_INPUT(!m.tie_embeddings || p.pp == 1,
                   "model.tie_embeddings = true shares the token table with the LM head, which parallel.pp = {} "
                   "puts on different pipeline ranks; hint: set model.tie_embeddings = false to pipeline, or "
                   "parallel.pp = 1",
                   p.pp);
}

}  // namespace loom::models

#pragma once
// What the decoder-only transformer kinds (gpt, llama) answer alike: they read token sequences,
// count tokens, look up one table row per token, and name the same keys when memory is short.
// Each kind adds its name, its checks (on top of validate_transformer) and its chain.
#include "loom/models/registry.h"

namespace loom::models {

class DecoderKind : public ModelKind {
 public:
  std::unique_ptr<data::Batches> open_data(const Config& config) const override;
  data::SampleFormat sample_format() const override { return data::SampleFormat::Tokens; }
  Throughput throughput(const ModelConfig& config) const override;
  int64_t lookups_per_sample(const ModelConfig& config, int64_t tokens) const override;
  std::string weight_keys(const ModelConfig& m) const override;
  std::string activation_keys(const ModelConfig& m) const override;
  std::string_view memory_hint() const override;
};

}  // namespace loom::models

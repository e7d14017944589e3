#include "loom/models/decoder_kind.h"

#include <fmt/format.h>

namespace loom::models {

std::unique_ptr<data::Batches> DecoderKind::open_data(const Config& config) const {
  return data::token_batches(config);
}

Throughput DecoderKind::throughput(const ModelConfig& config) const { return {"tokens", "tok", config.seq_len}; }

int64_t DecoderKind::lookups_per_sample(const ModelConfig&, int64_t tokens) const { return tokens; }

std::string DecoderKind::weight_keys(const ModelConfig& m) const {
  return fmt::format("model.n_layers = {}, model.d_model = {}, model.vocab = {}", m.n_layers, m.d_model, m.vocab);
}

std::string DecoderKind::activation_keys(const ModelConfig& m) const {
  return fmt::format(" x model.seq_len = {}", m.seq_len);
}

std::string_view DecoderKind::memory_hint() const {
  return "lower train.micro_batch, set memory.recompute = \"full\" or shrink the model";
}

}  // namespace loom::models

#include "loom/data/token_source.h"

#include "loom/data/markov_source.h"
#include "loom/data/token_file.h"

namespace loom::data {

std::unique_ptr<TokenSource> open_source(const Config& config) {
  const std::string& source = config.data.source;
  const auto seed = static_cast<uint64_t>(config.train.seed);
  const int64_t min_tokens = config.model.seq_len + 1;
  if (source == "synthetic") return std::make_unique<MarkovSource>(config.model.vocab, seed);
  if (source.starts_with("text:"))
    return std::make_unique<TokenFile>(source.substr(5), 1, config.model.vocab, min_tokens, seed);
  // tokens:PATH
  const std::string& dtype = config.data.token_dtype;
  const int width = dtype == "uint32" || (dtype == "auto" && config.model.vocab > 65536) ? 4 : 2;
  return std::make_unique<TokenFile>(source.substr(7), width, config.model.vocab, min_tokens, seed);
}

}  // namespace loom::data

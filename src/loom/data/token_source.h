#pragma once
// A token source maps a global sample index to a window of tokens, deterministically: the same
// index gives the same window in every run and every layout. The sampler decides which indices a
// micro-batch holds.
#include <cstdint>
#include <memory>
#include <string>

#include "loom/core/config.h"

namespace loom::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Writes `length` token ids of sample `index` to `out`; every id is < the model's vocab.
  virtual void window(int64_t index, int64_t length, int64_t* out) const = 0;
  virtual std::string describe() const = 0;
};

// The source `data.source` names, checked against the model (ids < vocab, long enough for
// seq_len + 1 tokens). Throws InputError on a missing, truncated or out-of-range file.
std::unique_ptr<TokenSource> open_source(const Config& config);

// NOTE [Vocabulary from the data]: a token file prepared by `loom data prepare` states its
// vocabulary in its sidecar (NOTE [Token sidecar]), so model.vocab = "auto" takes it from there,
// and a model.vocab that differs from it is refused: a larger one trains embedding rows no id
// reaches (and `loom generate` would sample ids the tokenizer cannot decode), a smaller one cannot
// hold the ids. data.valid must be ids of the same tokenizer as data.source (the same vocabulary
// and, when both sidecars name a model, the same model by checksum), or its loss measures
// nothing. A sidecar that names a tokenizer model requires the model beside it, unchanged.
//
// Replaces model.vocab = "auto" (ModelConfig::kVocabAuto) by the vocabulary of data.source's
// sidecar and checks data.source and data.valid against model.vocab and each other, as above.
// InputError naming the numbers, the files and a hint. Leaves "auto" for a data.source that is
// not a token file (config validation refuses it, saying so). Every rank may call it.
void resolve_vocab(Config& config);

// The width in bytes (2 or 4) of the ids of the tokens:PATH file `path` under data.token_dtype =
// `token_dtype` for a model of `vocab` ids (NOTE [Token width]). InputError when the sidecar
// disagrees with the file or with an explicit token_dtype, or when "auto" cannot tell.
int token_width(const std::string& path, Option<TokenWidth> token_dtype, int64_t vocab);

}  // namespace loom::data

#pragma once
// `loom data prepare`: text files as a token file of a tokenizer (byte level, or a SentencePiece
// model trained on the texts or given), with the sidecar that describes the ids (NOTE [Token
// sidecar]), the tokenizer model beside it, and optionally a validation split of whole documents
// (NOTE [Documents]).
#include <optional>
#include <string>
#include <vector>

#include "loom/core/output_file.h"
#include "loom/data/token_sidecar.h"

namespace loom::data {

struct PrepareOptions {
  std::vector<PathUse> texts;
  // "byte", "bpe", "unigram" (trained on the texts), or the path of a SentencePiece model file.
  std::string tokenizer = "byte";
  // Pieces to train for bpe and unigram (0: 8000); for "byte" and a model file, 0 or the
  // tokenizer's own vocabulary.
  int64_t vocab = 0;
  std::optional<double> valid_fraction;  // in (0, 1): also write the validation split
  std::string dtype = "auto";            // "uint16" | "uint32" | "auto" (uint16 when the vocab fits)
  PathUse out{"", "--out"};
};

// What prepare_tokens wrote.
struct PreparedTokens {
  TokenSidecar train;
  std::optional<TokenSidecar> valid;  // with valid_fraction
  std::string valid_path;             // "" without
  std::vector<std::string> written;   // every file, in the order they were written
};

// `out` with ".valid" before its extension: data.bin -> data.valid.bin, data -> data.valid.
std::string valid_split_path(const std::string& out);
// The tokenizer model written beside the token file `out`: OUT.tokenizer.model.
std::string tokenizer_model_beside(const std::string& out);

// Reads the texts, trains or loads the tokenizer, encodes every document and writes the token
// file `out`, its sidecar, the tokenizer model (bpe, unigram, or a copy of the given one, so the
// token file is self-contained) and with valid_fraction the validation split and its sidecar,
// which shares the model. All through OutputFile (NOTE [Output files]): on any failure no file is
// replaced. InputError, before anything is written, for bad options, a text that is missing, a
// directory, empty or not UTF-8, a vocabulary the text cannot support, a model file that is
// missing or not a model, too few documents to split, an output that is a directory or the same
// file as an input, or too little disk space.
PreparedTokens prepare_tokens(const PrepareOptions& options);

// The byte-level token file of one text (prepare_tokens with tokenizer "byte" and ids of
// `token_bytes`, 2 or 4); returns its sidecar.
TokenSidecar write_byte_tokens(const PathUse& text, const PathUse& out, int token_bytes);

}  // namespace loom::data

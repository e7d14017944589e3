#pragma once
// Tokenizers: text <-> token ids. "byte" (one id per byte, vocab 256) needs no model; "bpe" and
// "unigram" are SentencePiece models trained by `loom data prepare` (or given to it) and stored
// beside the token file (NOTE [Token sidecar]); "byte-bpe" is GPT-2's byte-level BPE from a
// tokenizer.json or vocab.json and merges.txt (NOTE [Byte-level BPE]). A token file's sidecar names its tokenizer, so whoever reads the
// tokens (training, `loom generate`) finds the same one.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;  // "byte" | "bpe" | "unigram" | "byte-bpe"
  virtual int64_t vocab() const = 0;     // every id encode returns is < vocab()
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // The text of `ids`; ids that end inside a multi-byte character decode to what they hold so far,
  // so decoding a growing list and printing the new suffix streams text.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
};

std::unique_ptr<Tokenizer> byte_tokenizer();
// Whether this build can open SentencePiece (bpe, unigram, model files): not in a sanitizer build,
// whose runtime refuses the module's dlopen(RTLD_DEEPBIND) (NOTE [SentencePiece in its own scope]);
// there every SentencePiece call throws an Error saying so.
bool sentencepiece_available();
// A tokenizer's model as one file's bytes: `path` itself (a SentencePiece model or a
// tokenizer.json), or in a model folder its tokenizer.model (a Llama's; its tokenizer.json is the
// same model), else its tokenizer.json, else its vocab.json and merges.txt as the text of a
// tokenizer.json (NOTE [Byte-level BPE]). InputError naming what is missing, and `role`.
std::string read_tokenizer_file(const std::string& path, const std::string& role);
// Whether the folder `dir` holds tokenizer files read_tokenizer_file reads.
bool has_tokenizer_files(const std::string& dir);
// The tokenizer of read_tokenizer_file(path); InputError naming `path` when it is missing or not a
// model.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The tokenizer of a model file's bytes `model`: a tokenizer.json's byte-level BPE, else a
// SentencePiece model; InputError naming `name` when they are neither.
std::unique_ptr<Tokenizer> tokenizer_from_model(const std::string& model, const std::string& name);

// Trains a SentencePiece model of `kind` ("bpe" | "unigram") with `vocab` pieces on the lines of
// `documents` (NOTE [Trained tokenizers]) and returns the model file's bytes; the same documents
// give the same bytes. InputError when the text cannot support `vocab` pieces (naming the most it
// can), or `vocab` is too small for the characters of the text (naming the least).
std::string train_tokenizer(const std::string& kind, int64_t vocab, const std::vector<std::string_view>& documents);
// The tokenizer of the token file `token_path`, as its sidecar names it (byte level when the
// sidecar names none). InputError when the sidecar names a model file that is missing (naming it
// and the token file) or that does not match the sidecar's vocabulary.
std::unique_ptr<Tokenizer> tokenizer_of(const std::string& token_path);

struct TokenSidecar;
// The bytes of the tokenizer model that `sidecar`, the sidecar of `token_path`, names ("" for a
// byte-level sidecar). InputError naming the model, the sidecar and the token file when the model
// is missing, or is not the file the ids were made with (its checksum differs).
std::string read_tokenizer_model(const std::string& token_path, const TokenSidecar& sidecar);

}  // namespace loom::data

#pragma once
// NOTE [Token sidecar]: a token file is flat ids with nothing in it to say their width or what
// they mean, so a uint32 file read as uint16 trains on every other token 0 without a word, and ids
// of one tokenizer decoded by another read as nonsense. `loom data prepare` therefore writes
// beside `X` a small JSON file `X.json`, versioned:
//   {"format": "loom-tokens", "version": 1, "dtype": "uint16" | "uint32", "vocab": 256,
//    "tokens": N, "source": "<first text path>", "source_checksum": "<FNV-1a 64 of it, 16 hex>",
//    "tokenizer": "byte" | "bpe" | "unigram" | "byte-bpe", "tokenizer_model": "<file name>" ("" for byte),
//    "tokenizer_checksum": "<FNV-1a 64 of the model file>" ("" for byte),
//    "sources": [{"path": "<text path>", "checksum": "<FNV-1a 64>"}, ...]}
// data.token_dtype = "auto" reads the width from it; the token count checks that the file is the
// one that was prepared (tokens x width = its size); model.vocab = "auto" reads the vocabulary.
// The tokenizer model (a SentencePiece model file, or for byte-bpe a tokenizer.json: NOTE
// [Byte-level BPE]) lies beside the sidecar: tokenizer_model is
// relative to the sidecar's directory, so the token file, its sidecar and its model move together;
// its checksum says the model is the one the ids were made with. "sources" lists every text file
// the ids came from (all of them, also for a validation split: the texts were split by document).
// Readers refuse another format or a newer version; fields they do not know are ignored, so
// version 1 gained the tokenizer fields and "sources" without a bump: a sidecar without them is
// byte level, and a reader that ignores them still reads the width, count and vocab right.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace loom::data {

// A text file a token file was prepared from.
struct SourceText {
  std::string path;      // as given
  std::string checksum;  // fnv1a_hex of its bytes
  bool operator==(const SourceText&) const = default;
};

struct TokenSidecar {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string dtype;            // "uint16" | "uint32"
  int64_t vocab = 0;            // every id is < vocab
  int64_t tokens = 0;
  std::string source;           // the text the file was prepared from, as given
  std::string source_checksum;  // fnv1a_hex of the source's bytes
  std::string tokenizer = "byte";  // "byte" | "bpe" | "unigram" | "byte-bpe"
  std::string tokenizer_model;     // the model's file name, relative to the sidecar's directory; "" for byte
  std::string tokenizer_checksum;  // fnv1a_hex of the model file; "" for byte
  std::vector<SourceText> sources;  // every text file, in order
  bool operator==(const TokenSidecar&) const = default;

  int token_bytes() const { return dtype == "uint32" ? 4 : 2; }
};

// `token_path` + ".json".
std::string sidecar_path(const std::string& token_path);
// The sidecar's file text: one JSON object and a newline.
std::string to_json(const TokenSidecar& sidecar);
// Parses a sidecar's text; InputError naming `path` when it is not JSON, not a loom-tokens
// sidecar, of a newer version, or lacks a field.
TokenSidecar parse_sidecar(const std::string& text, const std::string& path);
// The sidecar of `token_path` when there is one (parse_sidecar's errors otherwise).
std::optional<TokenSidecar> read_sidecar(const std::string& token_path);
// The path of the tokenizer model `sidecar` (of the token file `token_path`) names: its
// tokenizer_model beside the sidecar. "" for a byte-level sidecar.
std::string tokenizer_model_path(const std::string& token_path, const TokenSidecar& sidecar);

// 64-bit FNV-1a, fed in pieces: the checksum a sidecar records of its source.
class Fnv1a {
 public:
  void update(std::string_view bytes);
  uint64_t value() const { return hash_; }
  std::string hex() const { return fmt::format("{:016x}", hash_); }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace loom::data

#pragma once
// A flat little-endian array of token ids, memory-mapped: 1 byte per token for byte-level text,
// 2 (uint16) or 4 (uint32) for token files as tokenizer preprocessors write them. Sample `index`
// is the window starting at a position drawn from (seed, index).
#include <string>

#include "loom/data/token_source.h"

namespace loom::data {

class TokenFile final : public TokenSource {
 public:
  // Maps and checks the file: it exists, its size is whole tokens, it holds at least
  // `min_tokens`, and every id is < vocab. Throws InputError otherwise.
  TokenFile(const std::string& path, int token_bytes, int64_t vocab, int64_t min_tokens, uint64_t seed);
  ~TokenFile() override;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  void window(int64_t index, int64_t length, int64_t* out) const override;
  std::string describe() const override;
  int64_t size() const { return count_; }
  int64_t token(int64_t position) const;

 private:
  std::string path_;
  int token_bytes_;
  int64_t count_ = 0;
  const unsigned char* data_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint64_t key_;
};

// Writes `text_path` as byte-level tokens (one id per byte) to `out_path` with `token_bytes` (2 or
// 4) little-endian bytes per id. Returns the number of tokens written.
int64_t write_byte_tokens(const std::string& text_path, const std::string& out_path, int token_bytes);

}  // namespace loom::data

#pragma once
// A flat little-endian array of token ids: 1 byte per token for byte-level text, 2 (uint16) or 4
// (uint32) for token files as tokenizer preprocessors write them. Sample `index` is the window
// starting at a position drawn from (seed, index). The file is read with positioned reads, and a
// file that changes under a run is reported as such (NOTE [Data files change under a run]).
#include <string>

#include "loom/data/data_file.h"
#include "loom/data/token_source.h"

namespace loom::data {

class TokenFile final : public TokenSource {
 public:
  // Opens and checks the file: it exists, its size is whole tokens, it holds at least
  // `min_tokens`, and every id is < vocab (read in pieces of DataFile::kScanChunk). Throws
  // InputError otherwise.
  TokenFile(const std::string& path, int token_bytes, int64_t vocab, int64_t min_tokens, uint64_t seed);

  // Reads one window; loom::Error when the file changed since it was opened.
  void window(int64_t index, int64_t length, int64_t* out) const override;
  std::string describe() const override;
  int64_t size() const { return count_; }
  int64_t token(int64_t position) const;
  // `count` ids from `first` on into `out`.
  void read_tokens(int64_t first, int64_t count, int64_t* out) const;

 private:
  DataFile file_;
  int token_bytes_;
  int64_t count_ = 0;
  uint64_t key_;
};

}  // namespace loom::data

#include "loom/data/token_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; add byte swaps");

namespace {

// The little-endian id of `width` bytes at `p`.
int64_t decode(const unsigned char* p, int width) {
  switch (width) {
    case 1: return *p;
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    default: { uint32_t v; std::memcpy(&v, p, 4); return v; }
  }
}

}  // namespace

TokenFile::TokenFile(const std::string& path, int token_bytes, int64_t vocab, int64_t min_tokens, uint64_t seed)
    : file_(path, "data file"), token_bytes_(token_bytes), key_(stream_key(seed, "data.windows")) {
  const int64_t bytes = file_.size();
  LOOM_CHECK_INPUT(bytes % token_bytes == 0,
                   "data file '{}' is truncated: {} bytes is not a whole number of {}-byte tokens; hint: "
                   "check data.token_dtype or regenerate it with `loom data prepare`",
                   path, bytes, token_bytes);
  count_ = bytes / token_bytes;
  LOOM_CHECK_INPUT(count_ >= min_tokens,
                   "data file '{}' holds {} tokens, fewer than one sample needs (seq_len + 1 = {})", path, count_,
                   min_tokens);
  const int64_t chunk = DataFile::kScanChunk / token_bytes;
  std::vector<int64_t> ids(static_cast<size_t>(std::min(chunk, count_)));
  for (int64_t first = 0; first < count_; first += chunk) {
    const int64_t n = std::min(chunk, count_ - first);
    read_tokens(first, n, ids.data());
    for (int64_t i = 0; i < n; ++i)
      LOOM_CHECK_INPUT(ids[static_cast<size_t>(i)] < vocab,
                       "data file '{}' holds token id {} at position {}, but model.vocab is {}; hint: raise "
                       "model.vocab or check data.token_dtype",
                       path, ids[static_cast<size_t>(i)], first + i, vocab);
  }
}

void TokenFile::read_tokens(int64_t first, int64_t count, int64_t* out) const {
  // The raw bytes fit in the front of `out` (a token is at most 4 of its 8 bytes); widen from
  // the back so no id is overwritten before it is read.
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  file_.read(first * token_bytes_, count * token_bytes_, bytes);
  for (int64_t i = count - 1; i >= 0; --i) out[i] = decode(bytes + i * token_bytes_, token_bytes_);
}

int64_t TokenFile::token(int64_t position) const {
  int64_t id = 0;
  read_tokens(position, 1, &id);
  return id;
}

void TokenFile::window(int64_t index, int64_t length, int64_t* out) const {
  const auto starts = static_cast<uint64_t>(count_ - length + 1);
  const auto start = static_cast<int64_t>(uniform_int(key_, static_cast<uint64_t>(index), starts));
  read_tokens(start, length, out);
}

std::string TokenFile::describe() const {
  return fmt::format("'{}' ({} tokens of {} byte{})", file_.path(), count_, token_bytes_, token_bytes_ == 1 ? "" : "s");
}

}  // namespace loom::data

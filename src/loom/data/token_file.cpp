#include "loom/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; add byte swaps");

TokenFile::TokenFile(const std::string& path, int token_bytes, int64_t vocab, int64_t min_tokens, uint64_t seed)
    : path_(path), token_bytes_(token_bytes), key_(stream_key(seed, "data.windows")) {
  struct stat st {};
  LOOM_CHECK_INPUT(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode),
                   "data file '{}' does not exist or is not a regular file (data.source)", path);
  const auto bytes = static_cast<int64_t>(st.st_size);
  LOOM_CHECK_INPUT(bytes % token_bytes == 0,
                   "data file '{}' is truncated: {} bytes is not a whole number of {}-byte tokens; hint: "
                   "check data.token_dtype or regenerate it with `loom data prepare`",
                   path, bytes, token_bytes);
  count_ = bytes / token_bytes;
  LOOM_CHECK_INPUT(count_ >= min_tokens,
                   "data file '{}' holds {} tokens, fewer than one sample needs (seq_len + 1 = {})", path, count_,
                   min_tokens);
  const int fd = ::open(path.c_str(), O_RDONLY);
  LOOM_CHECK_INPUT(fd >= 0, "cannot open data file '{}': {}", path, std::strerror(errno));
  mapped_bytes_ = static_cast<size_t>(bytes);
  void* mapped = ::mmap(nullptr, mapped_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  LOOM_CHECK(mapped != MAP_FAILED, "cannot map data file '{}': {}", path, std::strerror(errno));
  data_ = static_cast<const unsigned char*>(mapped);
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t id = token(i);
    if (id >= vocab) {
      ::munmap(const_cast<unsigned char*>(data_), mapped_bytes_);
      throw InputError(fmt::format("data file '{}' holds token id {} at position {}, but model.vocab is {}; "
                                   "hint: raise model.vocab or check data.token_dtype",
                                   path, id, i, vocab));
    }
  }
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), mapped_bytes_);
}

int64_t TokenFile::token(int64_t position) const {
  const unsigned char* p = data_ + position * token_bytes_;
  switch (token_bytes_) {
    case 1: return *p;
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    default: { uint32_t v; std::memcpy(&v, p, 4); return v; }
  }
}

void TokenFile::window(int64_t index, int64_t length, int64_t* out) const {
  const auto starts = static_cast<uint64_t>(count_ - length + 1);
  const auto start = static_cast<int64_t>(uniform_int(key_, static_cast<uint64_t>(index), starts));
  for (int64_t t = 0; t < length; ++t) out[t] = token(start + t);
}

std::string TokenFile::describe() const {
  return fmt::format("'{}' ({} tokens of {} byte{})", path_, count_, token_bytes_, token_bytes_ == 1 ? "" : "s");
}

int64_t write_byte_tokens(const std::string& text_path, const std::string& out_path, int token_bytes) {
  LOOM_CHECK_INPUT(token_bytes == 2 || token_bytes == 4, "token width {} must be 2 (uint16) or 4 (uint32)",
                   token_bytes);
  std::ifstream in(text_path, std::ios::binary);
  LOOM_CHECK_INPUT(in.good(), "cannot read text file '{}'", text_path);
  const std::vector<unsigned char> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<unsigned char> out(text.size() * static_cast<size_t>(token_bytes), 0);
  for (size_t i = 0; i < text.size(); ++i) out[i * static_cast<size_t>(token_bytes)] = text[i];
  // Write beside the target and rename, so a failure leaves no half-written token file.
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    LOOM_CHECK_INPUT(file.good(), "cannot write token file '{}'", out_path);
    file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    LOOM_CHECK(file.good(), "writing token file '{}' failed", out_path);
  }
  LOOM_CHECK(std::rename(tmp.c_str(), out_path.c_str()) == 0, "cannot rename '{}' to '{}': {}", tmp, out_path,
             std::strerror(errno));
  return static_cast<int64_t>(text.size());
}

}  // namespace loom::data

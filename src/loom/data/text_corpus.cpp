#include "loom/data/text_corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/data/token_sidecar.h"

namespace loom::data {

std::string read_file_bytes(const PathUse& file) {
  struct stat st {};
  LOOM_CHECK_INPUT(::stat(file.path.c_str(), &st) == 0, "{} '{}' cannot be read: {}", file.role, file.path,
                   std::strerror(errno));
  LOOM_CHECK_INPUT(!S_ISDIR(st.st_mode), "{} '{}' is a directory; hint: give a file", file.role, file.path);
  std::ifstream in(file.path, std::ios::binary);
  LOOM_CHECK_INPUT(in.good(), "{} '{}' cannot be read: {}", file.role, file.path, std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOOM_CHECK_INPUT(!in.bad(), "{} '{}' cannot be read: {}", file.role, file.path, std::strerror(errno));
  return bytes;
}

namespace {

// The length of the well-formed UTF-8 character at the start of `s` (non-empty), or 0.
size_t utf8_length(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (narrower where forms are banned)
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return n;
}

TextFile read_text(const PathUse& file) {
  TextFile text{file.path, read_file_bytes(file), ""};
  LOOM_CHECK_INPUT(!text.bytes.empty(), "{} '{}' is empty: there are no tokens to write; hint: give a text file with "
                   "at least one byte", file.role, file.path);
  if (const size_t bad = invalid_utf8_offset(text.bytes); bad != std::string::npos) {
    const std::string_view before = std::string_view(text.bytes).substr(0, bad);
    const auto line = std::count(before.begin(), before.end(), '\n') + 1;
    const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
    throw InputError(fmt::format(
        "{} '{}' is not UTF-8: line {} has the byte 0x{:02x} at byte offset {} of the file ({} of the line), which "
        "begins no well-formed character; hint: convert the file to UTF-8",
        file.role, file.path, line, static_cast<unsigned char>(text.bytes[bad]), bad, bad - line_start));
  }
  Fnv1a checksum;
  checksum.update(text.bytes);
  text.checksum = checksum.hex();
  return text;
}

}  // namespace

size_t invalid_utf8_offset(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text.substr(i));
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// NOTE [Documents]
std::vector<std::string_view> split_documents(std::string_view text) {
  std::vector<std::string_view> documents;
  size_t begin = 0;          // of the document being read
  bool seen_words = false;   // it has a non-blank line
  bool after_blank = false;  // and a blank line after it
  for (size_t at = 0; at < text.size();) {
    const size_t newline = text.find('\n', at);
    const size_t end = newline == std::string_view::npos ? text.size() : newline + 1;
    const bool blank = is_blank(text.substr(at, end - at));
    if (!blank && after_blank) {  // a new paragraph starts here
      documents.push_back(text.substr(begin, at - begin));
      begin = at, after_blank = false;
    }
    if (blank && seen_words) after_blank = true;
    seen_words = seen_words || !blank;
    at = end;
  }
  if (begin < text.size()) documents.push_back(text.substr(begin));
  return documents;
}

std::vector<bool> choose_valid(const std::vector<int64_t>& sizes, double fraction) {
  LOOM_CHECK(sizes.size() >= 2 && fraction > 0 && fraction < 1, "choose_valid needs two documents and a fraction in "
             "(0, 1), got {} and {}", sizes.size(), fraction);
  std::vector<bool> valid(sizes.size(), false);
  double seen = 0, held = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto size = static_cast<double>(sizes[i]);
    seen += size;
    // Taken when |held + size - fraction seen| < |held - fraction seen|.
    if (held + size / 2 < fraction * seen) valid[i] = true, held += size;
  }
  if (std::none_of(valid.begin(), valid.end(), [](bool v) { return v; })) {
    // Every document is larger than twice its share: hold out the one nearest the wanted size.
    const double want = fraction * seen;
    const auto nearest = std::min_element(sizes.begin(), sizes.end(), [&](int64_t a, int64_t b) {
      return std::abs(static_cast<double>(a) - want) < std::abs(static_cast<double>(b) - want);
    });
    valid[static_cast<size_t>(nearest - sizes.begin())] = true;
  }
  if (std::all_of(valid.begin(), valid.end(), [](bool v) { return v; })) valid.front() = false;
  return valid;
}

TextCorpus::TextCorpus(const std::vector<PathUse>& files) {
  files_.reserve(files.size());
  for (const PathUse& file : files) files_.push_back(read_text(file));
  for (const TextFile& file : files_)
    for (const std::string_view document : split_documents(file.bytes)) documents_.push_back(document);
}

int64_t TextCorpus::bytes() const {
  int64_t total = 0;
  for (const TextFile& file : files_) total += static_cast<int64_t>(file.bytes.size());
  return total;
}

}  // namespace loom::data

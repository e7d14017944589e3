#pragma once
// The text files `loom data prepare` reads: whole, checked (not empty, UTF-8) and cut into
// documents (NOTE [Documents]), so a validation split takes whole documents.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/output_file.h"

namespace loom::data {

// The bytes of `file`; InputError naming its role and path when it is missing, a directory, or
// cannot be read.
std::string read_file_bytes(const PathUse& file);

// The offset of the first byte of `text` that does not belong to a well-formed UTF-8 character
// (overlong forms, surrogates and code points past U+10FFFF are not), or npos when there is none.
size_t invalid_utf8_offset(std::string_view text);

// NOTE [Documents]: a validation split must hold text the model never trains on, and a sequence
// that starts in one split and ends in the other would put half a paragraph on each side. So the
// texts are cut into documents, and a split takes whole documents only: each file is one or more
// documents, and within a file a blank line (empty, or only spaces, tabs and carriage returns)
// ends one. A document is its lines with the blank lines that follow it (blank lines at the start
// of a file belong to its first document), so the documents of a file, concatenated in order, are
// the file byte for byte, and no document ends mid-line.
std::vector<std::string_view> split_documents(std::string_view text);

// Which documents go to the validation split, given each document's size (in tokens) and the
// fraction `fraction` in (0, 1) of all tokens wanted there: a document is taken when that brings
// the held-out share of the documents so far closer to `fraction`, so the split is spread evenly
// over the texts and holds about `fraction` of the tokens. At least one document is taken and at
// least one left; `sizes` must hold two or more positive sizes. Deterministic.
std::vector<bool> choose_valid(const std::vector<int64_t>& sizes, double fraction);

// One text file, read whole.
struct TextFile {
  std::string path;      // as given
  std::string bytes;
  std::string checksum;  // Fnv1a hex of the bytes
};

// The text files of a `loom data prepare`, with their documents in order, file by file.
class TextCorpus {
 public:
  // Reads every file; InputError (naming the role and path) when one is missing, a directory,
  // empty, or not UTF-8 (with the line, and the byte's offset in the file and in the line).
  explicit TextCorpus(const std::vector<PathUse>& files);
  TextCorpus(const TextCorpus&) = delete;  // the documents view the files' bytes
  TextCorpus& operator=(const TextCorpus&) = delete;

  const std::vector<TextFile>& files() const { return files_; }
  const std::vector<std::string_view>& documents() const { return documents_; }
  int64_t bytes() const;

 private:
  std::vector<TextFile> files_;
  std::vector<std::string_view> documents_;
};

}  // namespace loom::data

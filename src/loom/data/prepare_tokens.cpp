#include "loom/data/prepare_tokens.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/data/data_file.h"

namespace loom::data {

TokenSidecar write_byte_tokens(const PathUse& text, const PathUse& out, int token_bytes) {
  LOOM_CHECK_INPUT(token_bytes == 2 || token_bytes == 4, "token width {} must be 2 (uint16) or 4 (uint32)",
                   token_bytes);
  struct stat st {};
  LOOM_CHECK_INPUT(::stat(text.path.c_str(), &st) == 0, "{} '{}' cannot be read: {}; hint: give a text file",
                   text.role, text.path, std::strerror(errno));
  LOOM_CHECK_INPUT(!S_ISDIR(st.st_mode), "{} '{}' is a directory; hint: give one text file (join several into one "
                   "first)", text.role, text.path);
  const bool regular = S_ISREG(st.st_mode);
  const std::string empty = fmt::format("{} '{}' is empty: there are no tokens to write; hint: give a text file "
                                        "with at least one byte", text.role, text.path);
  LOOM_CHECK_INPUT(!regular || st.st_size > 0, "{}", empty);
  const PathUse sidecar{sidecar_path(out.path), out.role + " (its sidecar .json)"};
  check_output_paths({text}, {out, sidecar});
  if (regular) check_free_space(out, static_cast<int64_t>(st.st_size) * token_bytes);

  std::ifstream in(text.path, std::ios::binary);
  LOOM_CHECK_INPUT(in.good(), "{} '{}' cannot be read: {}", text.role, text.path, std::strerror(errno));
  OutputFile tokens(out.path);
  Fnv1a checksum;
  std::vector<char> bytes(static_cast<size_t>(DataFile::kScanChunk));
  std::string ids;
  int64_t count = 0;
  while (in) {
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const auto n = static_cast<size_t>(in.gcount());
    LOOM_CHECK(!in.bad(), "reading {} '{}' failed: {}", text.role, text.path, std::strerror(errno));
    if (n == 0) break;
    checksum.update({bytes.data(), n});
    ids.assign(n * static_cast<size_t>(token_bytes), '\0');
    for (size_t i = 0; i < n; ++i) ids[i * static_cast<size_t>(token_bytes)] = bytes[i];  // little-endian
    tokens.write(ids);
    count += static_cast<int64_t>(n);
  }
  LOOM_CHECK_INPUT(count > 0, "{}", empty);

  TokenSidecar meta;
  meta.dtype = token_bytes == 2 ? "uint16" : "uint32";
  meta.vocab = 256;
  meta.tokens = count;
  meta.source = text.path;
  meta.source_checksum = checksum.hex();
  OutputFile side(sidecar.path);
  side.write(to_json(meta));
  tokens.flush(), side.flush();  // a full disk is reported here, before any old file is touched
  // An old sidecar goes first: a failure between the two renames leaves a token file without a
  // sidecar (which "auto" refuses when ambiguous), never a new file described by the old sidecar.
  LOOM_CHECK(::unlink(sidecar.path.c_str()) == 0 || errno == ENOENT, "cannot replace '{}': {}", sidecar.path,
             std::strerror(errno));
  tokens.commit();
  side.commit();
  return meta;
}

}  // namespace loom::data

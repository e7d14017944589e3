#include "loom/data/token_source.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/data/data_file.h"
#include "loom/data/markov_source.h"
#include "loom/data/token_file.h"
#include "loom/data/token_sidecar.h"
#include "loom/data/tokenizer.h"

namespace loom::data {

namespace {

// True when some id of `file` read as uint32 is >= vocab: the file cannot be uint32 ids of this
// model. Reads until the first such id (at once for a uint16 file of real text).
bool has_uint32_over(const DataFile& file, int64_t vocab) {
  const int64_t count = file.size() / 4, chunk = DataFile::kScanChunk / 4;
  std::vector<uint32_t> ids(static_cast<size_t>(std::min(chunk, count)));
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t n = std::min(chunk, count - first);
    file.read(first * 4, n * 4, ids.data());
    if (std::any_of(ids.begin(), ids.begin() + n, [&](uint32_t id) { return id >= vocab; })) return true;
  }
  return false;
}

constexpr std::string_view kTokens = "tokens:";

// The path of a "tokens:PATH" data source, or "".
std::string tokens_path(const std::string& source) {
  return source.starts_with(kTokens) ? source.substr(kTokens.size()) : std::string();
}

// Checks the token file `path` (the data source `key` names) with its sidecar `side` against a
// model of `vocab` ids, and that the tokenizer model it names is beside it (NOTE [Vocabulary
// from the data]).
void check_token_data(const std::string& path, const TokenSidecar& side, int64_t vocab, const std::string& key) {
  LOOM_CHECK_INPUT(vocab == side.vocab,
                   "model.vocab = {}, but {} '{}' holds ids of a vocabulary of {} ({} tokenizer; its sidecar '{}' "
                   "says so); hint: model.vocab = \"auto\" takes the data's",
                   vocab, key, path, side.vocab, side.tokenizer, sidecar_path(path));
  read_tokenizer_model(path, side);
}

// data.valid's ids against data.source's: the same tokenizer.
void check_same_tokenizer(const std::string& train, const TokenSidecar& a, const std::string& valid,
                          const TokenSidecar& b) {
  const bool same = a.vocab == b.vocab && a.tokenizer == b.tokenizer &&
                    (a.tokenizer_checksum.empty() || b.tokenizer_checksum.empty() ||
                     a.tokenizer_checksum == b.tokenizer_checksum);
  LOOM_CHECK_INPUT(same,
                   "data.valid '{}' holds ids of another tokenizer than data.source '{}' ({} of {} pieces, model "
                   "checksum \"{}\", against {} of {}, \"{}\"); hint: prepare both with one tokenizer, e.g. `loom "
                   "data prepare --valid-fraction 0.01` writes both, or --tokenizer MODEL for the second",
                   valid, train, b.tokenizer, b.vocab, b.tokenizer_checksum, a.tokenizer, a.vocab,
                   a.tokenizer_checksum);
}

}  // namespace

// NOTE [Vocabulary from the data]
void resolve_vocab(Config& config) {
  const std::string source = tokens_path(config.data.source), valid = tokens_path(config.data.valid);
  std::error_code ec;  // a missing data file is named first, before its sidecar or its vocabulary
  for (auto [key, path] : {std::pair{"data.source", source}, {"data.valid", valid}})
    LOOM_CHECK_INPUT(path.empty() || std::filesystem::is_regular_file(path, ec), "{}: {}", key,
                     missing_file_text("the data file", path));
  const std::optional<TokenSidecar> source_side = source.empty() ? std::nullopt : read_sidecar(source);
  const std::optional<TokenSidecar> valid_side = valid.empty() ? std::nullopt : read_sidecar(valid);
  if (config.model.vocab == ModelConfig::kVocabAuto && !source.empty()) {
    std::error_code ec;
    LOOM_CHECK_INPUT(source_side.has_value(),
                     "model.vocab = \"auto\" reads the vocabulary from the sidecar '{}' of data file '{}', but there "
                     "is none{}; hint: prepare the token file with `loom data prepare`, or give model.vocab as a number",
                     sidecar_path(source), source,
                     std::filesystem::exists(source, ec) ? "" : " (nor the data file)");
    config.model.vocab = source_side->vocab;
  }
  if (config.model.vocab == ModelConfig::kVocabAuto) return;
  if (source_side) check_token_data(source, *source_side, config.model.vocab, "data.source");
  if (valid_side) check_token_data(valid, *valid_side, config.model.vocab, "data.valid");
  if (source_side && valid_side) check_same_tokenizer(source, *source_side, valid, *valid_side);
}

// NOTE [Token width]: a tokens:PATH file holds no word of its ids' width, and the wrong width
// reads garbage that still looks like ids (a uint32 file read as uint16 is every other token 0).
//  - With a sidecar (NOTE [Token sidecar]) its dtype is the width; it must agree with the file
//    (tokens x width = size, else the file changed since it was prepared) and with an explicit
//    data.token_dtype.
//  - Without one, an explicit data.token_dtype is taken as stated. "auto" takes only what the
//    file itself proves: a size that is not a multiple of 4 cannot be uint32; nor can a file with
//    an id >= vocab when read as uint32 (a uint16 file of real text almost always has one in its
//    first ids). Anything else is refused, saying how to state the width.
int token_width(const std::string& path, Option<TokenWidth> token_dtype, int64_t vocab) {
  const DataFile file(path, "data file");
  const int64_t bytes = file.size();
  if (const std::optional<TokenSidecar> side = read_sidecar(path)) {
    const std::string side_path = sidecar_path(path);
    LOOM_CHECK_INPUT(side->tokens <= bytes && side->tokens * side->token_bytes() == bytes,
                     "data file '{}' has {} bytes, but its sidecar '{}' says {} {} tokens ({} x {} bytes): the file "
                     "changed since it was prepared; hint: prepare it again with `loom data prepare`",
                     path, bytes, side_path, side->tokens, side->dtype, side->tokens, side->token_bytes());
    LOOM_CHECK_INPUT(token_dtype == TokenWidth::Auto || token_dtype.name() == side->dtype,
                     "data.token_dtype = \"{}\", but the sidecar '{}' of data file '{}' says its ids are {}; hint: "
                     "set data.token_dtype = \"auto\" to use the sidecar's",
                     token_dtype.name(), side_path, path, side->dtype);
    return side->token_bytes();
  }
  if (token_dtype != TokenWidth::Auto) return token_dtype == TokenWidth::UInt32 ? 4 : 2;
  if (bytes % 4 != 0 || bytes == 0 || has_uint32_over(file, vocab)) return 2;
  throw InputError(fmt::format(
      "data file '{}' ({} bytes, no sidecar '{}') could hold uint16 or uint32 ids, and data.token_dtype = \"auto\" "
      "cannot tell which; hint: state it, e.g. --set data.token_dtype=uint16 (or uint32), or write the file with "
      "`loom data prepare`, which records the width in a sidecar",
      path, bytes, sidecar_path(path)));
}

std::unique_ptr<TokenSource> open_source(const Config& config) {
  const std::string& source = config.data.source;
  const auto seed = static_cast<uint64_t>(config.train.seed);
  const int64_t min_tokens = config.model.seq_len + 1;
  if (source == "synthetic") return std::make_unique<MarkovSource>(config.model.vocab, seed);
  if (source.starts_with("text:"))
    return std::make_unique<TokenFile>(source.substr(5), 1, config.model.vocab, min_tokens, seed);
  // tokens:PATH
  const std::string path = tokens_path(source);
  if (const std::optional<TokenSidecar> side = read_sidecar(path))
    check_token_data(path, *side, config.model.vocab, "data.source");
  const int width = token_width(path, config.data.token_dtype, config.model.vocab);
  return std::make_unique<TokenFile>(path, width, config.model.vocab, min_tokens, seed);
}

}  // namespace loom::data

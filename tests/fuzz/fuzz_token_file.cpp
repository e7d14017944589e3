// Token files with their sidecars, as training opens them (data/token_source.h): resolve_vocab
// (model.vocab = "auto", the sidecar against the model) and open_source (the width, the size, every
// id < vocab), then windows of the opened file.
// Input: a line "VOCAB SEQ_LEN TOKEN_DTYPE" (VOCAB a number or "auto"; a line that does not read
// leaves the defaults 256 16 auto), then the sidecar's text (none when empty), then after a line
// "%%" the token file's bytes.
// Contract (NOTE [Reader contract]) plus: every id of a window is in [0, model.vocab).
#include <charconv>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "loom/core/config.h"
#include "loom/data/token_source.h"

namespace {

// The first line's settings into `config`; what does not read keeps its default.
void read_settings(std::string_view line, loom::Config& config) {
  std::istringstream in{std::string(line)};
  std::string vocab, dtype;
  int64_t seq_len = 16;
  in >> vocab >> seq_len >> dtype;
  config.model.vocab = 256;
  if (vocab == "auto") config.model.vocab = loom::ModelConfig::kVocabAuto;
  int64_t v = 0;
  if (std::from_chars(vocab.data(), vocab.data() + vocab.size(), v).ec == std::errc() && v > 0) config.model.vocab = v;
  config.model.seq_len = seq_len >= 1 && seq_len <= 4096 ? seq_len : 16;
  for (std::string_view name : loom::OptionNames<loom::TokenWidth>::names)
    if (dtype == name) config.data.token_dtype = name;
}

void check(std::string_view input) {
  const size_t nl = input.find('\n');
  const std::string_view first = input.substr(0, nl);
  input.remove_prefix(nl == std::string_view::npos ? input.size() : nl + 1);
  const auto split = loom::fuzz::parts(input, 2);
  loom::Config config;
  read_settings(first, config);
  const std::string path = loom::fuzz::Scratch::write("tokens.bin", split.size() > 1 ? split[1] : "");
  if (split[0].empty()) loom::fuzz::Scratch::remove("tokens.bin.json");
  else loom::fuzz::Scratch::write("tokens.bin.json", split[0]);
  config.data.source = "tokens:" + path;
  loom::data::resolve_vocab(config);
  loom::fuzz::require(config.model.vocab > 0, "resolve_vocab left model.vocab at auto");
  const auto source = loom::data::open_source(config);
  const int64_t length = config.model.seq_len + 1;
  std::vector<int64_t> window(static_cast<size_t>(length));
  for (int64_t index : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1} << 40}) {
    source->window(index, length, window.data());
    for (int64_t id : window) loom::fuzz::require(id >= 0 && id < config.model.vocab, "a window holds an id >= vocab");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}

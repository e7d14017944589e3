// A Hugging Face tokenizer.json (data/byte_bpe.h, NOTE [Byte-level BPE]): its text read as
// byte-level BPE (byte_bpe_from_json), then the file read as `--tokenizer tokenizer.json` reads it
// (load_tokenizer), and the tokenizer used on a few texts and on the input itself.
// Input: the file's text.
// Only text that starts as JSON does (is_tokenizer_json) is read from the file: anything else
// load_tokenizer hands to SentencePiece, which this build cannot open (tests/fuzz/README.md).
// Contract (NOTE [Reader contract]) plus: every id encode gives is below vocab(); the file reads
// as the same tokenizer as the text; and where the vocabulary gives every id one piece and there is
// no added token, a text decodes back to itself (after the leading space of add_prefix_space).
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/data/byte_bpe.h"
#include "loom/data/tokenizer.h"

namespace {

// Texts of every pre-token kind: letters, numbers, contractions, runs of spaces, other code
// points, bytes that are not UTF-8, and nothing.
const std::vector<std::string> kTexts = {
    "Hello, world! It's 2024 -- we'll see.\n", "  x\t\ty   \n\n",
    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82", "\xff\xfe\x80 broken", ""};

// Whether every id of model.vocab belongs to one piece and no added token may take one: then
// decoding a text's ids gives its bytes back. The reader returned, so model.vocab is an object of ids.
bool one_piece_per_id(const nlohmann::json& j) {
  if (j.contains("added_tokens") && j.at("added_tokens").is_array() && !j.at("added_tokens").empty()) return false;
  std::set<int64_t> ids;
  for (const auto& [piece, id] : j.at("model").at("vocab").items())
    if (!ids.insert(id.get<int64_t>()).second) return false;
  return true;
}

void check_tokenizer(const loom::data::Tokenizer& t, const std::vector<std::string>& texts, bool round_trips) {
  loom::fuzz::require(t.kind() == "byte-bpe" && t.vocab() >= 1, "kind or vocab out of range");
  // add_prefix_space, seen from outside: a text that does not start with a space gains one.
  const bool prefix = t.decode(t.encode("x")) == " x";
  for (const std::string& text : texts) {
    const std::vector<int64_t> ids = t.encode(text);
    for (int64_t id : ids) loom::fuzz::require(id >= 0 && id < t.vocab(), "encode gave an id outside the vocabulary");
    if (!round_trips) continue;
    const std::string want = prefix && !text.empty() && text.front() != ' ' ? " " + text : text;
    loom::fuzz::require(t.decode(ids) == want, "a text does not decode back to itself");
  }
}

void check(std::string_view input) {
  const std::string text(input);
  const std::unique_ptr<loom::data::Tokenizer> t = loom::data::byte_bpe_from_json(text, "fuzz/tokenizer.json");
  std::vector<std::string> texts = kTexts;
  texts.emplace_back(input.substr(0, 256));  // the pieces the vocabulary and merges spell
  check_tokenizer(*t, texts, one_piece_per_id(nlohmann::json::parse(text)));
  if (!loom::data::is_tokenizer_json(text)) return;
  const std::unique_ptr<loom::data::Tokenizer> from_file =
      loom::data::load_tokenizer(loom::fuzz::Scratch::write("tokenizer.json", text));
  loom::fuzz::require(from_file->kind() == t->kind() && from_file->vocab() == t->vocab(),
                      "load_tokenizer and byte_bpe_from_json disagree");
  for (const std::string& s : texts)
    loom::fuzz::require(from_file->encode(s) == t->encode(s),
                        "load_tokenizer and byte_bpe_from_json encode differently");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}

// GPT-2's vocab.json and merges.txt (data/byte_bpe.h, NOTE [Byte-level BPE]), read from a model
// folder as `--tokenizer DIR` reads them: read_tokenizer_file turns the two files into the text of
// an equivalent tokenizer.json (byte_bpe_json), which reads as byte-level BPE (tokenizer_from_model).
// Input: vocab.json's text, then after a line "%%" merges.txt's bytes (fuzz_util.h's parts(); no
// such line: merges.txt is empty). Any pair of files can be written so: a line "%%" in vocab.json
// is not JSON (a JSON string holds no newline), and merges.txt may hold more such lines.
// Contract (NOTE [Reader contract]) plus: the folder gives the tokenizer.json its two texts give;
// every id encode gives is below vocab(); and where the vocabulary gives every id one piece, a text
// decodes back to itself (the tokenizer.json made has no added token and no prefix space).
#include <cstdint>
#include <filesystem>
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

// The model folder: vocab.json and merges.txt only, so read_tokenizer_file reads those two.
const std::string& folder() {
  static const std::string dir = [] {
    const std::filesystem::path d = loom::fuzz::Scratch::dir() / "gpt2";
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

// Whether every id of vocab.json belongs to one piece: then decoding a text's ids gives its bytes
// back. The reader returned, so vocab.json is an object of ids.
bool one_piece_per_id(const std::string& vocab_json) {
  std::set<int64_t> ids;
  const nlohmann::json vocab = nlohmann::json::parse(vocab_json);  // items() of a temporary would dangle
  for (const auto& [piece, id] : vocab.items())
    if (!ids.insert(id.get<int64_t>()).second) return false;
  return true;
}

void check(std::string_view input) {
  const auto split = loom::fuzz::parts(input, 2);
  const std::string vocab(split[0]), merges(split.size() > 1 ? split[1] : std::string_view());
  const std::string& dir = folder();
  loom::fuzz::Scratch::write("gpt2/vocab.json", vocab);
  loom::fuzz::Scratch::write("gpt2/merges.txt", merges);
  const std::string json = loom::data::read_tokenizer_file(dir, "tokenizer model");
  loom::fuzz::require(json == loom::data::byte_bpe_json(vocab, merges, dir),
                      "the folder and its files' texts give different tokenizer.json");
  loom::fuzz::require(loom::data::is_tokenizer_json(json), "byte_bpe_json wrote what is not a tokenizer.json");
  const std::unique_ptr<loom::data::Tokenizer> t = loom::data::tokenizer_from_model(json, dir);
  loom::fuzz::require(t->kind() == "byte-bpe" && t->vocab() >= 1, "kind or vocab out of range");
  std::vector<std::string> texts = kTexts;
  texts.emplace_back(merges.substr(0, 256));  // the pieces the merges spell
  const bool round_trips = one_piece_per_id(vocab);
  for (const std::string& text : texts) {
    const std::vector<int64_t> ids = t->encode(text);
    for (int64_t id : ids) loom::fuzz::require(id >= 0 && id < t->vocab(), "encode gave an id outside the vocabulary");
    if (round_trips) loom::fuzz::require(t->decode(ids) == text, "a text does not decode back to itself");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}

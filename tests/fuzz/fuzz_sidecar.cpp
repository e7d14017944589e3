// A token file's sidecar (data/token_sidecar.h, NOTE [Token sidecar]): the JSON text, read as
// text and as the file beside a token file. Input: the sidecar's text.
// Contract (NOTE [Reader contract]) plus the value's invariants, and a sidecar that reads writes
// back (to_json) as one that reads equal.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/data/token_sidecar.h"

namespace {

void check_value(const loom::data::TokenSidecar& s) {
  loom::fuzz::require(s.version >= 1 && s.version <= loom::data::TokenSidecar::kVersion, "version out of range");
  loom::fuzz::require(s.dtype == "uint16" || s.dtype == "uint32", "dtype neither uint16 nor uint32");
  loom::fuzz::require(s.vocab > 0 && s.tokens >= 0, "vocab or tokens out of range");
  loom::fuzz::require(s.tokenizer == "byte" || s.tokenizer == "bpe" || s.tokenizer == "unigram", "unknown tokenizer");
  loom::fuzz::require((s.tokenizer == "byte") == s.tokenizer_model.empty(), "tokenizer and its model disagree");
}

void check(std::string_view input) {
  const std::string text(input);
  const loom::data::TokenSidecar s = loom::data::parse_sidecar(text, "fuzz.bin.json");
  check_value(s);
  const std::string token_path = loom::fuzz::Scratch::write("fuzz.bin", "");
  loom::fuzz::Scratch::write("fuzz.bin.json", text);
  const auto from_file = loom::data::read_sidecar(token_path);
  loom::fuzz::require(from_file.has_value() && *from_file == s, "read_sidecar and parse_sidecar disagree");
  loom::data::TokenSidecar again;
  try {
    again = loom::data::parse_sidecar(loom::data::to_json(s), "to_json");
  } catch (const loom::InputError& e) {
    loom::fuzz::fail(std::string("to_json wrote a sidecar that does not read back: ") + e.what());
  }
  loom::fuzz::require(again == s, "to_json's sidecar reads back different");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}

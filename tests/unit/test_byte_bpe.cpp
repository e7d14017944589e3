// Byte-level BPE (NOTE [Byte-level BPE]): GPT-2's pre-token boundaries seen through merges that
// only apply inside one pre-token, merge order by rank, added tokens, exact round trips of any
// UTF-8 text, and the tokenizer.json files loom refuses. tests/cli/hf.sh checks whole texts against
// a reference written in Python.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/data/byte_bpe.h"
#include "unit/input_error.h"

namespace loom::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using loom::testing::input_error;

// GPT-2's stand-in of a byte, spelled out: printable bytes are themselves, the rest 256 + n.
std::string piece_of(unsigned char b) {
  int n = 0;
  for (int c = 0; c < b; ++c)
    if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) ++n;
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  const auto cp = static_cast<char32_t>(printable ? b : 256 + n);
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// A tokenizer.json: the 256 byte pieces (id = byte), then one piece per merge, in order.
std::string tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                           const nlohmann::json& added = nlohmann::json::array()) {
  nlohmann::json vocab = nlohmann::json::object(), list = nlohmann::json::array();
  for (int b = 0; b < 256; ++b) vocab[piece_of(static_cast<unsigned char>(b))] = b;
  for (const auto& [a, b] : merges) {
    const size_t id = vocab.size();
    if (!vocab.contains(a + b)) vocab[a + b] = id;
    list.push_back(a + " " + b);
  }
  return nlohmann::json{{"added_tokens", added}, {"normalizer", nullptr},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", list}}}}
      .dump();
}

const std::string kSpace = piece_of(' ');

TEST(ByteBpe, MergesApplyWithinPreTokensOnly) {
  // "Ġ a" and "Ġ Ġ" merge only where GPT-2's pattern keeps the pieces in one pre-token.
  const auto t = byte_bpe_from_json(tokenizer_json({{kSpace, "a"}, {kSpace, kSpace}}), "t.json");
  const int64_t space_a = 256, two_spaces = 257;
  EXPECT_THAT(t->encode("x a"), ElementsAre('x', space_a));
  EXPECT_THAT(t->encode("x  a"), ElementsAre('x', ' ', space_a));   // the run's last space goes with "a"
  EXPECT_THAT(t->encode("x   a"), ElementsAre('x', two_spaces, space_a));
  EXPECT_THAT(t->encode("x\ta"), ElementsAre('x', '\t', 'a'));      // only U+0020 joins a word
  EXPECT_THAT(t->encode("x    "), ElementsAre('x', two_spaces, two_spaces));  // a run at the end stays whole
  EXPECT_THAT(t->encode("1 a2"), ElementsAre('1', space_a, '2'));
}

TEST(ByteBpe, ContractionsNumbersAndOtherRuns) {
  const auto t = byte_bpe_from_json(
      tokenizer_json({{"'", "t"}, {"n", "'"}, {"1", "2"}, {"a", "1"}, {"'", "T"}, {"N", "'"}}), "t.json");
  // "don't" is "don" then "'t": the "n '" merge never sees its pair.
  EXPECT_THAT(t->encode("don't"), ElementsAre('d', 'o', 'n', 256));
  // GPT-2's contractions are lower case: "'T" is a run of its own ("'") before the letters.
  EXPECT_THAT(t->encode("DON'T"), ElementsAre('D', 'O', 'N', '\'', 'T'));
  EXPECT_THAT(t->encode("a12"), ElementsAre('a', 258));                      // letters and numbers split
}

TEST(ByteBpe, MergesApplyByRank) {
  const auto ab_first = byte_bpe_from_json(tokenizer_json({{"a", "b"}, {"b", "c"}}), "t.json");
  const auto bc_first = byte_bpe_from_json(tokenizer_json({{"b", "c"}, {"a", "b"}}), "t.json");
  EXPECT_THAT(ab_first->encode("abc"), ElementsAre(256, 'c'));
  EXPECT_THAT(bc_first->encode("abc"), ElementsAre('a', 256));
  EXPECT_THAT(ab_first->encode("ababab"), ElementsAre(256, 256, 256));  // every occurrence at once
}

TEST(ByteBpe, AddedTokensKeepTheirIdsAndEveryTextRoundTrips) {
  const nlohmann::json added = {{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}}};
  const auto t = byte_bpe_from_json(tokenizer_json({{kSpace, "t"}, {"h", "e"}}, added), "t.json");
  EXPECT_EQ(t->vocab(), 301);
  const std::vector<int64_t> ids = t->encode("he<|endoftext|> the");
  EXPECT_THAT(ids, ElementsAre(257, 300, 256, 257));
  for (const std::string text : {"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \t\n  x", "\xff\xfe broken",
                                 "the <|endoftext|><|endoftext|> end ", ""})
    EXPECT_EQ(t->decode(t->encode(text)), text);
}

TEST(ByteBpe, RefusesWhatItDoesNotCompute) {
  nlohmann::json j = nlohmann::json::parse(tokenizer_json({}));
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_THAT(input_error([&] { byte_bpe_from_json(j.dump(), "llama/tokenizer.json"); }),
              HasSubstr("llama/tokenizer.json: its pre-tokenizer is"));
  j = nlohmann::json::parse(tokenizer_json({}));
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_THAT(input_error([&] { byte_bpe_from_json(j.dump(), "n.json"); }), HasSubstr("n.json: it has a normalizer"));
  j = nlohmann::json::parse(tokenizer_json({}));
  j["model"]["vocab"].erase(kSpace);
  EXPECT_THAT(input_error([&] { byte_bpe_from_json(j.dump(), "v.json"); }), HasSubstr("lacks the piece of byte 32"));
  EXPECT_THAT(input_error([&] { byte_bpe_from_json("{not json", "x.json"); }), HasSubstr("x.json: not JSON"));
}

TEST(ByteBpe, VocabAndMergesFilesReadAsTheirTokenizerJson) {
  nlohmann::json vocab = nlohmann::json::parse(tokenizer_json({{"a", "b"}}))["model"]["vocab"];
  const auto t = byte_bpe_from_json(byte_bpe_json(vocab.dump(), "#version: 0.2\na b\n", "dir"), "dir");
  EXPECT_THAT(t->encode("abc"), ElementsAre(256, 'c'));
  EXPECT_TRUE(is_tokenizer_json(byte_bpe_json(vocab.dump(), "", "dir")));
}

}  // namespace
}  // namespace loom::data

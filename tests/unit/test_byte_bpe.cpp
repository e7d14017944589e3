// Byte-level BPE (NOTE [Byte-level BPE]): GPT-2's pre-token boundaries seen through merges that
// only apply inside one pre-token, merge order by rank, added tokens, exact round trips of any
// UTF-8 text, and the tokenizer.json files loom refuses. tests/cli/hf.sh checks whole texts against
// a reference written in Python.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "loom/core/error.h"
#include "loom/data/byte_bpe.h"
#include "loom/data/tokenizer.h"
#include "unit/input_error.h"
#include "unit/temp_dir.h"

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

// A malformed tokenizer.json is refused naming the file: a vocabulary that is not an object, an id
// written as text, no "model", an added token of the wrong type, and a file cut short.
TEST(ByteBpe, RefusesMalformedTokenizerJsonNamingTheFile) {
  const auto refusal = [](const nlohmann::json& j) {
    return input_error([&] { byte_bpe_from_json(j.dump(), "gpt2/tokenizer.json"); });
  };
  nlohmann::json j = nlohmann::json::parse(tokenizer_json({}));
  j["model"]["vocab"] = nlohmann::json::array({"a"});
  EXPECT_THAT(refusal(j), HasSubstr("gpt2/tokenizer.json: model.vocab is not an object"));
  j = nlohmann::json::parse(tokenizer_json({}));
  j["model"]["vocab"]["a"] = "97";
  EXPECT_THAT(refusal(j), HasSubstr("gpt2/tokenizer.json: the id of \"a\" is \"97\", not an id below"));
  j = nlohmann::json::parse(tokenizer_json({}));
  j.erase("model");
  EXPECT_THAT(refusal(j), HasSubstr("gpt2/tokenizer.json: not a BPE tokenizer.json"));
  EXPECT_THAT(refusal(nlohmann::json::parse(tokenizer_json({}, {{{"id", 300}, {"content", 5}}}))),
              HasSubstr("gpt2/tokenizer.json: not a tokenizer.json loom reads"));
  j = nlohmann::json::parse(tokenizer_json({}));  // a stray large id: refused, not a table of 2^23 pieces
  j["model"]["vocab"]["a"] = int64_t{1} << 23;
  EXPECT_THAT(refusal(j), HasSubstr("(ids are dense: under twice the"));
  const loom::testing::TempDir dir("loom_byte_bpe_json_");
  const std::string path = dir.file("tokenizer.json", tokenizer_json({}).substr(0, 100));
  EXPECT_THAT(input_error([&] { load_tokenizer(path); }), HasSubstr(path + ": not JSON"));
}

// Malformed vocab.json and merges.txt in a model folder are refused naming the folder (and the
// file, where it is one file's fault): vocab.json cut short, a vocabulary that is not an object, a
// merge of three pieces, an id written as text, and merges.txt missing.
TEST(ByteBpe, RefusesMalformedVocabAndMergesNamingTheFolder) {
  const loom::testing::TempDir dir("loom_byte_bpe_gpt2_");
  const std::string folder = std::filesystem::path(dir.path("vocab.json")).parent_path().string();
  const nlohmann::json vocab = nlohmann::json::parse(tokenizer_json({{"a", "b"}}))["model"]["vocab"];
  const auto refusal = [&](const std::string& vocab_json, const std::string& merges_txt) {
    dir.file("vocab.json", vocab_json);
    dir.file("merges.txt", merges_txt);
    return input_error([&] { load_tokenizer(folder); });
  };
  const std::string text = vocab.dump();
  EXPECT_THAT(refusal(text.substr(0, text.size() / 2), "a b\n"), HasSubstr(folder + "/vocab.json: not JSON"));
  EXPECT_THAT(refusal("[1, 2]", "a b\n"), HasSubstr(folder + ": model.vocab is not an object"));
  EXPECT_THAT(refusal(text, "#version: 0.2\na b c\n"), HasSubstr(folder + ": merge 0 is \"a b c\", not two pieces"));
  // A merges.txt line that is not UTF-8 cannot go into the tokenizer.json text (a fuzz finding: the
  // JSON library's own exception escaped).
  EXPECT_THAT(refusal(text, "a b\n\xff\xfe c\n"), HasSubstr(folder + "/merges.txt: a line is not UTF-8 text"));
  nlohmann::json wrong = vocab;
  wrong["a"] = "97";
  EXPECT_THAT(refusal(wrong.dump(), "a b\n"), HasSubstr(folder + ": the id of \"a\" is \"97\""));
  std::filesystem::remove(dir.path("merges.txt"));
  EXPECT_THAT(input_error([&] { load_tokenizer(folder); }),
              HasSubstr("tokenizer model " + folder + " is a folder with no tokenizer.model, tokenizer.json, or "
                        "vocab.json and merges.txt"));
}

}  // namespace
}  // namespace loom::data

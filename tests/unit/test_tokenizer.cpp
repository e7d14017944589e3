// Tokenizers (byte, SentencePiece bpe and unigram), the text corpus and its documents, the token
// sidecar's tokenizer fields, `loom data prepare` with a validation split, and model.vocab = "auto".
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include <unistd.h>

#include "loom/core/error.h"
#include "loom/data/prepare_tokens.h"
#include "loom/data/text_corpus.h"
#include "loom/data/token_sidecar.h"
#include "loom/data/token_source.h"
#include "loom/data/tokenizer.h"
#include "unit/input_error.h"

namespace loom::data {
namespace {

using ::testing::HasSubstr;
using loom::testing::input_error;

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("loom_tok_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name, const std::string& bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `paragraphs` paragraphs of made-up words (syllables drawn by a fixed generator) and numbers: a
// text with enough distinct subwords for a few hundred pieces.
std::string corpus_text(int paragraphs) {
  const std::vector<std::string> syllables = {"lo", "om", "tra", "in", "pa", "ral", "lel", "ten", "sor",
                                              "pipe", "line", "stage", "ba", "tch", "ze", "ro", "grad", "ient"};
  uint64_t state = 12345;
  const auto next = [&] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  std::string text;
  for (int p = 0; p < paragraphs; ++p) {
    for (int line = 0; line < 3; ++line) {
      for (int word = 0; word < 8; ++word) {
        for (uint64_t s = 0, n = 1 + next() % 3; s < n; ++s) text += syllables[next() % syllables.size()];
        text += word % 5 == 4 ? ", " : " ";
      }
      text += std::to_string(next() % 2000) + ".\n";
    }
    text += "\n";
  }
  return text;
}

// Text that a tokenizer trained on corpus_text has not seen: non-ASCII characters, the escaped
// space U+2581 itself, runs of spaces, tabs, carriage returns, a control byte, newlines.
const std::string kHardText =
    "na\xC3\xAFve caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E  two  spaces\ttab\r\n"
    "\xE2\x96\x81 escaped space \xF0\x9F\x98\x80 emoji\n\n  leading and trailing  \n\x01 12345\n";

std::vector<std::string_view> views(const std::string& text) { return split_documents(text); }

TEST(Tokenizer, ByteLevelRoundTripsAnyBytes) {
  const auto tok = byte_tokenizer();
  EXPECT_EQ(tok->kind(), "byte");
  EXPECT_EQ(tok->vocab(), 256);
  const std::string text = kHardText + std::string("\0\xff", 2);
  const std::vector<int64_t> ids = tok->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'n');
  EXPECT_EQ(ids.back(), 255);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_THROW(tok->decode({256}), Error);
}

class TrainedTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedTokenizer, RoundTripsTextExactlyAndCompresses) {
  const std::string text = corpus_text(60);
  const std::string model = train_tokenizer(GetParam(), 400, views(text));
  const auto tok = tokenizer_from_model(model, "m.model");
  EXPECT_EQ(tok->kind(), GetParam());
  EXPECT_EQ(tok->vocab(), 400);
  for (const std::string& t : {text, kHardText, std::string("x"), std::string()}) {
    const std::vector<int64_t> ids = tok->encode(t);
    for (const int64_t id : ids) ASSERT_TRUE(id >= 0 && id < 400) << id;
    EXPECT_EQ(tok->decode(ids), t);
  }
  // Subwords: far fewer ids than bytes on text like the training text.
  EXPECT_LT(tok->encode(text).size() * 2, text.size());
  // The same texts give the same model, byte for byte.
  EXPECT_EQ(train_tokenizer(GetParam(), 400, views(text)), model);
}

TEST_P(TrainedTokenizer, DecodingAGrowingListOnlyAppends) {
  const std::string text = corpus_text(60);
  const auto tok = tokenizer_from_model(train_tokenizer(GetParam(), 400, views(text)), "m.model");
  const std::vector<int64_t> ids = tok->encode(kHardText);
  std::string streamed;
  for (size_t n = 1; n <= ids.size(); ++n) {
    const std::string now = tok->decode({ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)});
    ASSERT_TRUE(now.starts_with(streamed)) << n;
    streamed = now;
  }
  EXPECT_EQ(streamed, kHardText);
}

TEST_P(TrainedTokenizer, NamesTheVocabularyTheTextCanSupport) {
  const std::string text = corpus_text(3);
  EXPECT_THAT(input_error([&] { train_tokenizer(GetParam(), 50000, views(text)); }),
              ::testing::MatchesRegex("--vocab 50000 is more than the text supports: a " + GetParam() +
                                      " tokenizer trained on it has at most [0-9]+ pieces; hint: --vocab [0-9]+ or "
                                      "less, or give more text"));
  EXPECT_THAT(input_error([&] { train_tokenizer(GetParam(), 100, views(text)); }),
              HasSubstr("--vocab 100 is too small for the text"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, TrainedTokenizer, ::testing::Values("bpe", "unigram"));

TEST(Tokenizer, LoadRefusesMissingAndNonModelFiles) {
  TempDir dir;
  EXPECT_THAT(input_error([&] { load_tokenizer(dir.path("none.model")); }),
              HasSubstr("tokenizer model '" + dir.path("none.model") + "' cannot be read"));
  const std::string text = dir.file("text.model", "not a model\n");
  EXPECT_THAT(input_error([&] { load_tokenizer(text); }),
              HasSubstr("tokenizer model '" + text + "' is not a SentencePiece model"));
  EXPECT_THAT(input_error([&] { load_tokenizer(dir.path("")); }), HasSubstr("is a directory"));
  const std::string good = dir.file("good.model", train_tokenizer("unigram", 400, views(corpus_text(60))));
  EXPECT_EQ(load_tokenizer(good)->kind(), "unigram");
}

}  // namespace
}  // namespace loom::data

// Tokenizers (byte, SentencePiece bpe and unigram), the text corpus and its documents, the token
// sidecar's tokenizer fields, `loom data prepare` with a validation split, and model.vocab = "auto".
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstring>
#include <numeric>

#include <unistd.h>

#include "loom/core/error.h"
#include "loom/data/prepare_tokens.h"
#include "loom/data/text_corpus.h"
#include "loom/data/token_sidecar.h"
#include "loom/data/token_source.h"
#include "loom/data/tokenizer.h"
#include "unit/input_error.h"
#include "unit/temp_dir.h"

namespace loom::data {
namespace {

using ::testing::HasSubstr;
using loom::testing::input_error;

using loom::testing::TempDir;

using loom::testing::contents;

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

// A sanitizer build cannot open SentencePiece (tests/sanitizers/README.md): the tests that train or
// load a model skip there, saying why; the byte level and every check before the module runs stay.
#define SKIP_WITHOUT_SENTENCEPIECE() \
  if (!sentencepiece_available()) GTEST_SKIP() << "SentencePiece cannot be opened in a sanitizer build"

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

class TrainedTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SKIP_WITHOUT_SENTENCEPIECE(); }
};

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
  EXPECT_THAT(input_error([&] { train_tokenizer(GetParam(), 300, {"\n\n"}); }), HasSubstr("the text has no line"));
}

TEST_P(TrainedTokenizer, TrainsOnATextOfOneLongLine) {
  std::string text = corpus_text(400);
  std::replace(text.begin(), text.end(), '\n', ' ');  // about 73 KB without a newline
  ASSERT_GT(text.size(), 65536u) << "longer than SentencePiece trains on in one piece";
  const auto tok = tokenizer_from_model(train_tokenizer(GetParam(), 400, views(text)), "m.model");
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_LT(tok->encode(text).size() * 2, text.size());
}

INSTANTIATE_TEST_SUITE_P(Kinds, TrainedTokenizer, ::testing::Values("bpe", "unigram"));

TEST(Tokenizer, LoadRefusesMissingAndNonModelFiles) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir dir("loom_tok_");
  EXPECT_THAT(input_error([&] { load_tokenizer(dir.path("none.model")); }),
              HasSubstr("tokenizer model '" + dir.path("none.model") + "' cannot be read"));
  const std::string text = dir.file("text.model", "not a model\n");
  EXPECT_THAT(input_error([&] { load_tokenizer(text); }),
              HasSubstr("tokenizer model '" + text + "' is not a SentencePiece model"));
  EXPECT_THAT(input_error([&] { load_tokenizer(dir.path("")); }),  // a folder: its tokenizer files
              HasSubstr("is a folder with no tokenizer.model, tokenizer.json, or vocab.json and merges.txt"));
  const std::string good = dir.file("good.model", train_tokenizer("unigram", 400, views(corpus_text(60))));
  EXPECT_EQ(load_tokenizer(good)->kind(), "unigram");
}

TEST(TokenizerCorpus, DocumentsAreParagraphsThatConcatenateToTheFile) {
  const std::string text = "\n\nfirst line\nsecond line\n\n \t\nnext para\r\n\r\nlast, no newline";
  const std::vector<std::string_view> docs = split_documents(text);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], "\n\nfirst line\nsecond line\n\n \t\n");  // leading blank lines join the first
  EXPECT_EQ(docs[1], "next para\r\n\r\n");
  EXPECT_EQ(docs[2], "last, no newline");
  std::string joined;
  for (const auto d : docs) joined += d;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(split_documents("one line").size(), 1u);
  EXPECT_EQ(split_documents("a\nb\nc\n").size(), 1u);  // no blank line: one document
  EXPECT_TRUE(split_documents("").empty());
}

TEST(TokenizerCorpus, RefusesEmptyAndNonUtf8FilesNamingTheLine) {
  TempDir dir("loom_tok_");
  const std::string empty = dir.file("empty.txt", "");
  EXPECT_THAT(input_error([&] { TextCorpus({{empty, "--text"}}); }), HasSubstr("--text '" + empty + "' is empty"));
  // Latin-1 "é" (0xe9) on line 3, byte 4 of that line, byte 16 of the file.
  const std::string latin1 = dir.file("latin1.txt", "line one\nline\ntwo\xe9!\n");
  EXPECT_THAT(input_error([&] { TextCorpus({{latin1, "--text"}}); }),
              HasSubstr("--text '" + latin1 + "' is not UTF-8: line 3 has the byte 0xe9 at byte offset 17 of the file "
                        "(3 of the line)"));
  // Overlong forms, surrogates, code points past U+10FFFF and cut characters are not UTF-8.
  for (const std::string bad : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x96", "\x80", "\xff"})
    EXPECT_EQ(invalid_utf8_offset("ok " + bad + " ok"), 3u) << bad;
  EXPECT_EQ(invalid_utf8_offset(kHardText), std::string::npos);
  EXPECT_EQ(invalid_utf8_offset(std::string("\0\x7f\xf4\x8f\xbf\xbf", 6)), std::string::npos);
  // The files are read in order, their documents after each other.
  const TextCorpus corpus({{dir.file("a.txt", "a1\n\na2\n"), "--text"}, {dir.file("b.txt", "b1\n"), "--text"}});
  EXPECT_EQ(corpus.documents(), (std::vector<std::string_view>{"a1\n\n", "a2\n", "b1\n"}));
  EXPECT_EQ(corpus.files()[1].checksum, [] { Fnv1a f; f.update("b1\n"); return f.hex(); }());
}

TEST(TokenizerSplit, TakesAboutTheFractionSpreadOverTheTextsDeterministically) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 500; ++i) sizes.push_back(20 + (i * 7919) % 180);  // 20 to 199 tokens
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  for (const double fraction : {0.01, 0.1, 0.5, 0.9}) {
    const std::vector<bool> valid = choose_valid(sizes, fraction);
    EXPECT_EQ(choose_valid(sizes, fraction), valid);
    int64_t held = 0;
    for (size_t i = 0; i < sizes.size(); ++i) held += valid[i] ? sizes[i] : 0;
    EXPECT_NEAR(static_cast<double>(held) / static_cast<double>(total), fraction, 0.01) << fraction;
    if (fraction < 0.1) continue;  // a handful of documents: too few to say how they spread
    // Spread: each half of the texts holds about half of the held-out tokens.
    int64_t first_half = 0;
    for (size_t i = 0; i < sizes.size() / 2; ++i) first_half += valid[i] ? sizes[i] : 0;
    EXPECT_NEAR(static_cast<double>(first_half) / static_cast<double>(held), 0.5, 0.1) << fraction;
  }
  // At least one document on each side, however the fraction falls.
  EXPECT_EQ(choose_valid({1000, 1000}, 0.01), (std::vector<bool>{true, false}));
  EXPECT_EQ(choose_valid({5000, 10, 5000}, 0.0001), (std::vector<bool>{false, true, false}));  // the nearest size
  EXPECT_EQ(choose_valid({10, 5000, 10}, 0.001), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(choose_valid({10, 10}, 0.99), (std::vector<bool>{false, true}));
}

// A token file's ids, read back as `width`-byte little-endian ids.
std::vector<int64_t> read_ids(const std::string& path, int width) {
  const std::string bytes = contents(path);
  std::vector<int64_t> ids(bytes.size() / static_cast<size_t>(width), 0);
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(&ids[i], bytes.data() + i * static_cast<size_t>(width), static_cast<size_t>(width));
  return ids;
}

TEST(TokenizerPrepare, BpeWithAValidationSplitOfWholeDocuments) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir dir("loom_tok_");
  const std::string a = dir.file("a.txt", corpus_text(60)), b = dir.file("b.txt", kHardText);
  PrepareOptions o;
  o.texts = {{a, "--text"}, {b, "--text"}};
  o.tokenizer = "bpe", o.vocab = 400, o.valid_fraction = 0.1, o.out = {dir.path("data.bin"), "--out"};
  const PreparedTokens done = prepare_tokens(o);
  EXPECT_EQ(done.valid_path, dir.path("data.valid.bin"));
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a.txt", "b.txt", "data.bin", "data.bin.json",
                                                   "data.bin.tokenizer.model", "data.valid.bin",
                                                   "data.valid.bin.json"}));
  // The sidecars, as read back.
  const TokenSidecar train = *read_sidecar(dir.path("data.bin")), valid = *read_sidecar(done.valid_path);
  EXPECT_EQ(train, done.train);
  EXPECT_EQ(valid, *done.valid);
  EXPECT_EQ(train.tokenizer, "bpe");
  EXPECT_EQ(train.vocab, 400);
  EXPECT_EQ(train.dtype, "uint16");
  EXPECT_EQ(train.tokenizer_model, "data.bin.tokenizer.model");
  EXPECT_EQ(valid.tokenizer_model, train.tokenizer_model);
  Fnv1a model_sum;
  model_sum.update(contents(dir.path("data.bin.tokenizer.model")));
  EXPECT_EQ(train.tokenizer_checksum, model_sum.hex());
  ASSERT_EQ(train.sources.size(), 2u);
  EXPECT_EQ(train.sources[1], (SourceText{b, [&] { Fnv1a f; f.update(kHardText); return f.hex(); }()}));
  EXPECT_EQ(train.source, a);
  // About a tenth of the tokens held out; the two files' documents, decoded, are the texts: each
  // document whole in exactly one split, in order.
  const double share = static_cast<double>(valid.tokens) / static_cast<double>(train.tokens + valid.tokens);
  EXPECT_NEAR(share, 0.1, 0.03);
  const auto tok = tokenizer_of(dir.path("data.bin"));
  const std::string train_text = tok->decode(read_ids(dir.path("data.bin"), 2));
  const std::string valid_text = tok->decode(read_ids(done.valid_path, 2));
  EXPECT_EQ(static_cast<int64_t>(read_ids(done.valid_path, 2).size()), valid.tokens);
  const TextCorpus corpus({{a, "--text"}, {b, "--text"}});
  std::string want_train, want_valid;
  size_t at_train = 0, at_valid = 0;
  for (const std::string_view d : corpus.documents()) {
    const bool in_train = train_text.compare(at_train, d.size(), d) == 0;
    const bool in_valid = valid_text.compare(at_valid, d.size(), d) == 0;
    ASSERT_NE(in_train, in_valid) << "a document in neither or both splits: " << d;
    (in_train ? at_train : at_valid) += d.size();
  }
  EXPECT_EQ(at_train, train_text.size());
  EXPECT_EQ(at_valid, valid_text.size());
  // Prepared again: the same files, byte for byte.
  const std::string first = contents(dir.path("data.bin")), first_valid = contents(done.valid_path);
  prepare_tokens(o);
  EXPECT_EQ(contents(dir.path("data.bin")), first);
  EXPECT_EQ(contents(done.valid_path), first_valid);
}

TEST(TokenizerPrepare, ReusesAModelAndCopiesItBeside) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir dir("loom_tok_");
  const std::string text = dir.file("t.txt", corpus_text(20));
  const std::string model = dir.file("given.model", train_tokenizer("unigram", 400, views(corpus_text(60))));
  PrepareOptions o;
  o.texts = {{text, "--text"}};
  o.tokenizer = model, o.dtype = "uint32", o.out = {dir.path("sub.bin"), "--out"};
  const PreparedTokens done = prepare_tokens(o);
  EXPECT_EQ(done.train.tokenizer, "unigram");
  EXPECT_EQ(done.train.dtype, "uint32");
  EXPECT_EQ(contents(dir.path("sub.bin.tokenizer.model")), contents(model));
  EXPECT_EQ(tokenizer_of(dir.path("sub.bin"))->decode(read_ids(dir.path("sub.bin"), 4)), corpus_text(20));
  // A byte-level file names no model, and decodes as bytes.
  o.tokenizer = "byte", o.dtype = "auto", o.out = {dir.path("bytes.bin"), "--out"};
  EXPECT_EQ(prepare_tokens(o).train.tokenizer_model, "");
  EXPECT_FALSE(std::filesystem::exists(dir.path("bytes.bin.tokenizer.model")));
  EXPECT_EQ(tokenizer_of(dir.path("bytes.bin"))->decode(read_ids(dir.path("bytes.bin"), 2)), corpus_text(20));
}

TEST(TokenizerPrepare, RefusesBadInputAndWritesNothing) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir dir("loom_tok_");
  const std::string text = dir.file("t.txt", corpus_text(5));
  const std::string one = dir.file("one.txt", "a single paragraph\nof two lines\n");
  const std::string out = dir.file("out.bin", "keep me");
  const auto refused = [&](PrepareOptions o) {
    if (o.texts.empty()) o.texts = {{text, "--text"}};
    o.out = {out, "--out"};
    const std::string message = input_error([&] { prepare_tokens(o); });
    EXPECT_EQ(contents(out), "keep me") << message;
    EXPECT_EQ(dir.names(), (std::vector<std::string>{"one.txt", "out.bin", "t.txt"})) << message;
    return message;
  };
  PrepareOptions o;
  o.tokenizer = "bpe", o.vocab = 100000;
  EXPECT_THAT(refused(o), HasSubstr("--vocab 100000 is more than the text supports"));
  o.tokenizer = "bpe", o.vocab = 300, o.valid_fraction = 0.1, o.texts = {{one, "--text"}};
  EXPECT_THAT(refused(o), HasSubstr("--valid-fraction 0.1 holds out whole documents and trains on the others, but "
                                    "the text holds 1 document"));
  o = {}, o.valid_fraction = 1.0;
  EXPECT_THAT(refused(o), HasSubstr("--valid-fraction 1 must be in (0, 1)"));
  o = {}, o.tokenizer = dir.path("none.model");
  EXPECT_THAT(refused(o), HasSubstr("is neither byte, bpe, unigram nor an existing tokenizer"));
  o = {}, o.tokenizer = text;
  EXPECT_THAT(refused(o), HasSubstr("tokenizer model '" + text + "' is not a SentencePiece model"));
  o = {}, o.vocab = 300;
  EXPECT_THAT(refused(o), HasSubstr("--vocab 300 with --tokenizer byte"));
  o = {}, o.dtype = "int8";
  EXPECT_THAT(refused(o), HasSubstr("--dtype int8 is not uint16, uint32 or auto"));
  o = {}, o.texts = {{text, "--text"}, {dir.path("missing.txt"), "--text"}};
  EXPECT_THAT(refused(o), HasSubstr("--text '" + dir.path("missing.txt") + "' cannot be read"));
  // An output onto an input: the validation split onto the text.
  o = {}, o.texts = {{dir.file("d.valid.bin", "x\n\ny\n"), "--text"}}, o.valid_fraction = 0.5;
  o.out = {dir.path("d.bin"), "--out"};
  EXPECT_THAT(input_error([&] { prepare_tokens(o); }),
              HasSubstr("--out (its validation split) '" + dir.path("d.valid.bin") + "' is the same file as --text"));
  EXPECT_FALSE(std::filesystem::exists(dir.path("d.bin")));
}

TEST(TokenizerPrepare, ValidSplitPathPutsValidBeforeTheExtension) {
  EXPECT_EQ(valid_split_path("data.bin"), "data.valid.bin");
  EXPECT_EQ(valid_split_path("/a.b/data"), "/a.b/data.valid");
  EXPECT_EQ(valid_split_path("dir/x.tar.bin"), "dir/x.tar.valid.bin");
  EXPECT_EQ(tokenizer_model_beside("dir/x.bin"), "dir/x.bin.tokenizer.model");
}

TEST(TokenizerSidecar, TokenizerFieldsRoundTripAndOldSidecarsReadAsBytes) {
  TokenSidecar s;
  s.dtype = "uint16", s.vocab = 8000, s.tokens = 5, s.source = "a.txt", s.source_checksum = "01";
  s.tokenizer = "unigram", s.tokenizer_model = "d.bin.tokenizer.model", s.tokenizer_checksum = "ab";
  s.sources = {{"a.txt", "01"}, {"dir/b c.txt", "02"}};
  const std::string text = to_json(s);
  EXPECT_THAT(text, HasSubstr("\"version\": 1"));
  EXPECT_THAT(text, HasSubstr("\"tokenizer\": \"unigram\""));
  EXPECT_EQ(parse_sidecar(text, "x.json"), s);
  // A first version-1 sidecar, without the tokenizer fields: byte level.
  const TokenSidecar old = parse_sidecar(R"({"format": "loom-tokens", "version": 1, "dtype": "uint16", "vocab": 256,
                                             "tokens": 3})", "x.json");
  EXPECT_EQ(old.tokenizer, "byte");
  EXPECT_EQ(old.tokenizer_model, "");
  EXPECT_TRUE(old.sources.empty());
  EXPECT_THAT(input_error([] {
                parse_sidecar(R"({"format": "loom-tokens", "version": 1, "dtype": "uint16", "vocab": 9, "tokens": 3,
                                 "tokenizer": "wordpiece"})", "x.json");
              }),
              HasSubstr("names tokenizer \"wordpiece\""));
  EXPECT_THAT(input_error([] {
                parse_sidecar(R"({"format": "loom-tokens", "version": 1, "dtype": "uint16", "vocab": 9, "tokens": 3,
                                 "tokenizer": "bpe"})", "x.json");
              }),
              HasSubstr("a bpe tokenizer needs a model file"));
  EXPECT_EQ(tokenizer_model_path("dir/d.bin", s), "dir/d.bin.tokenizer.model");
}

// A config on the token file `path` with model.vocab = `vocab`, resolved.
Config resolved(const std::string& source, int64_t vocab, const std::string& valid = "") {
  Config c;
  c.data.source = source, c.data.valid = valid, c.model.vocab = vocab;
  resolve_vocab(c);
  return c;
}

TEST(TokenizerVocab, AutoTakesTheSidecarsAndAMismatchIsRefused) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir dir("loom_tok_");
  const std::string text = dir.file("t.txt", corpus_text(60));
  PrepareOptions o;
  o.texts = {{text, "--text"}}, o.tokenizer = "bpe", o.vocab = 400, o.valid_fraction = 0.1;
  o.out = {dir.path("d.bin"), "--out"};
  prepare_tokens(o);
  const std::string d = "tokens:" + dir.path("d.bin"), v = "tokens:" + dir.path("d.valid.bin");
  EXPECT_EQ(resolved(d, ModelConfig::kVocabAuto, v).model.vocab, 400);
  EXPECT_EQ(resolved(d, 400, v).model.vocab, 400);
  EXPECT_EQ(resolved("synthetic", ModelConfig::kVocabAuto).model.vocab, ModelConfig::kVocabAuto);  // validation refuses it
  EXPECT_THAT(input_error([&] { resolved(d, 4096); }),
              HasSubstr("model.vocab = 4096, but data.source '" + dir.path("d.bin") +
                        "' holds ids of a vocabulary of 400 (bpe tokenizer; its sidecar '" + dir.path("d.bin.json") +
                        "' says so); hint: model.vocab = \"auto\""));
  // data.valid of another tokenizer: a byte-level file, or one of another bpe model of 400.
  o.tokenizer = "byte", o.vocab = 0, o.valid_fraction.reset(), o.out = {dir.path("bytes.bin"), "--out"};
  prepare_tokens(o);
  EXPECT_THAT(input_error([&] { resolved(d, ModelConfig::kVocabAuto, "tokens:" + dir.path("bytes.bin")); }),
              HasSubstr("model.vocab = 400, but data.valid '" + dir.path("bytes.bin") + "' holds ids of a vocabulary of 256"));
  o.tokenizer = "bpe", o.vocab = 400, o.texts = {{dir.file("u.txt", corpus_text(80)), "--text"}};
  o.out = {dir.path("other.bin"), "--out"};
  prepare_tokens(o);
  EXPECT_THAT(input_error([&] { resolved(d, ModelConfig::kVocabAuto, "tokens:" + dir.path("other.bin")); }),
              HasSubstr("data.valid '" + dir.path("other.bin") + "' holds ids of another tokenizer than data.source"));
  // The model beside the token file: missing, or changed.
  std::filesystem::rename(dir.path("d.bin.tokenizer.model"), dir.path("away.model"));
  EXPECT_THAT(input_error([&] { resolved(d, ModelConfig::kVocabAuto); }),
              HasSubstr("tokenizer model '" + dir.path("d.bin.tokenizer.model") + "' is missing: the sidecar '" +
                        dir.path("d.bin.json") + "' of token file '" + dir.path("d.bin") + "' names it"));
  EXPECT_THAT(input_error([&] { tokenizer_of(dir.path("d.bin")); }), HasSubstr("is missing"));
  std::filesystem::copy_file(dir.path("other.bin.tokenizer.model"), dir.path("d.bin.tokenizer.model"));
  EXPECT_THAT(input_error([&] { resolved(d, ModelConfig::kVocabAuto); }),
              HasSubstr("it is not the model these ids were made with"));
  // A missing data file is named first; an existing one without a sidecar has no "auto" to read.
  EXPECT_THAT(input_error([&] { resolved("tokens:" + dir.path("none.bin"), ModelConfig::kVocabAuto); }),
              HasSubstr("data.source: the data file '" + dir.path("none.bin") + "' does not exist"));
  std::filesystem::copy_file(dir.path("d.bin"), dir.path("none.bin"));
  EXPECT_THAT(input_error([&] { resolved("tokens:" + dir.path("none.bin"), ModelConfig::kVocabAuto); }),
              HasSubstr("model.vocab = \"auto\" reads the vocabulary from the sidecar '" + dir.path("none.bin.json")));
}

}  // namespace
}  // namespace loom::data

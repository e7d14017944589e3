// Data sources and the global sampler: deterministic, exact file formats, clear refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/clicks.h"
#include "loom/data/markov_source.h"
#include "loom/data/prepare_tokens.h"
#include "loom/data/sampler.h"
#include "loom/data/token_file.h"
#include "loom/data/token_sidecar.h"
#include "unit/input_error.h"
#include "unit/temp_dir.h"

namespace loom::data {
namespace {

using ::testing::HasSubstr;

using loom::testing::TempDir;

using loom::testing::input_error;

// The message of the loom::Error (not InputError: a failure at run time) that `fn` throws.
std::string run_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    ADD_FAILURE() << "expected a run-time Error, got InputError: " << e.what();
    return e.what();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

// Little-endian ids of `width` bytes.
std::string ids_bytes(const std::vector<uint32_t>& ids, int width) {
  std::string out;
  for (uint32_t id : ids) out.append(reinterpret_cast<const char*>(&id), static_cast<size_t>(width));
  return out;
}

using loom::testing::contents;

// A write that keeps the size: only the modification time tells (set a second ahead, as a
// rewrite within the file system's timestamp tick would otherwise look unchanged).
void touch_forward(const std::string& path) {
  const auto t = std::filesystem::last_write_time(path);
  std::filesystem::last_write_time(path, t + std::chrono::seconds(1));
}

TEST(MarkovSource, IsDeterministicAndFollowsItsChain) {
  const MarkovSource a(64, 1), b(64, 1), c(64, 2);
  std::vector<int64_t> x(100), y(100), z(100);
  a.window(17, 100, x.data());
  b.window(17, 100, y.data());
  c.window(17, 100, z.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  // Each token has at most four successors.
  std::map<int64_t, std::set<int64_t>> successors;
  for (int64_t i = 0; i < 400; ++i) {
    a.window(i, 100, x.data());
    for (size_t t = 0; t + 1 < x.size(); ++t) {
      ASSERT_LT(x[t], 64);
      successors[x[t]].insert(x[t + 1]);
    }
  }
  for (const auto& [token, next] : successors) EXPECT_LE(next.size(), 4u) << token;
}

TEST(TokenFile, ReadsUint16AndUint32WrittenByPrepare) {
  TempDir dir;
  const std::string text = dir.file("in.txt", "hello, loom! hello, world.");
  for (int width : {2, 4}) {
    const std::string out = dir.path("out" + std::to_string(width) + ".bin");
    EXPECT_EQ(write_byte_tokens({text, "--text"}, {out, "--out"}, width).tokens, 26);
    EXPECT_EQ(std::filesystem::file_size(out), 26u * width);
    const TokenFile file(out, width, 256, 5, 0);
    ASSERT_EQ(file.size(), 26);
    EXPECT_EQ(file.token(0), 'h');
    EXPECT_EQ(file.token(25), '.');
    std::vector<int64_t> w(5);
    file.window(3, 5, w.data());  // a window of consecutive tokens of the text
    const std::string all = "hello, loom! hello, world.";
    const auto start = all.find(std::string(w.begin(), w.end()));
    EXPECT_NE(start, std::string::npos);
  }
}

TEST(TokenFile, RefusesMissingTruncatedShortAndOutOfRangeFiles) {
  TempDir dir;
  EXPECT_THAT(input_error([&] { TokenFile(dir.path("nope.bin"), 2, 256, 2, 0); }), HasSubstr("does not exist"));
  EXPECT_THAT(input_error([&] { TokenFile(dir.file("odd.bin", "abc"), 2, 256, 1, 0); }), HasSubstr("truncated"));
  EXPECT_THAT(input_error([&] { TokenFile(dir.file("short.bin", std::string(8, '\0')), 2, 256, 5, 0); }),
              HasSubstr("holds 4 tokens"));
  const std::string big{'\x01', '\x00', '\x2c', '\x01'};  // ids 1 and 300
  EXPECT_THAT(input_error([&] { TokenFile(dir.file("big.bin", big), 2, 256, 1, 0); }),
              HasSubstr("token id 300 at position 1, but model.vocab is 256"));
}

// A window is the one the seed draws: start = uniform_int(stream key "data.windows", index,
// count - length + 1), read whole from the file (as when the file was memory-mapped).
TEST(TokenFile, WindowsAreTheSeedsDraws) {
  TempDir dir;
  std::vector<uint32_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * 7919) % 70000);
  for (int width : {2, 4}) {
    if (width == 2)
      for (auto& id : ids) id %= 65536;
    const std::string path = dir.file("w" + std::to_string(width) + ".bin", ids_bytes(ids, width));
    const TokenFile file(path, width, 70000, 33, 42);
    const uint64_t key = stream_key(42, "data.windows");
    std::vector<int64_t> got(33);
    for (int64_t index : {0, 1, 17, 123456}) {
      file.window(index, 33, got.data());
      const auto start = static_cast<size_t>(uniform_int(key, static_cast<uint64_t>(index), ids.size() - 33 + 1));
      const std::vector<int64_t> want(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                      ids.begin() + static_cast<std::ptrdiff_t>(start + 33));
      EXPECT_EQ(got, want) << "width " << width << ", index " << index;
    }
  }
}

// The opening scan reads in pieces: an id past the vocab is found in any piece, at its position.
TEST(TokenFile, ScanFindsIdsOverVocabPastTheFirstChunk) {
  TempDir dir;
  std::vector<uint32_t> ids(static_cast<size_t>(DataFile::kScanChunk / 2 * 3 + 5), 7);
  ids.back() = 300;
  const std::string path = dir.file("long.bin", ids_bytes(ids, 2));
  EXPECT_THAT(input_error([&] { TokenFile(path, 2, 256, 2, 0); }),
              HasSubstr(fmt::format("token id 300 at position {}", ids.size() - 1)));
  EXPECT_EQ(TokenFile(path, 2, 301, 2, 0).size(), static_cast<int64_t>(ids.size()));
}

TEST(TokenFile, AFileThatShrinksOrChangesDuringTheRunIsAnErrorNotACrash) {
  TempDir dir;
  const std::string path = dir.file("t.bin", ids_bytes(std::vector<uint32_t>(1000, 3), 2));
  const TokenFile file(path, 2, 256, 10, 0);
  std::vector<int64_t> w(10);
  file.window(0, 10, w.data());
  std::filesystem::resize_file(path, 5);
  EXPECT_THAT(run_error([&] { file.window(1, 10, w.data()); }),
              HasSubstr("data file '" + path + "' changed during the run (2000 bytes at start, now 5); hint: do not "
                        "rewrite a data file while loom trains on it"));
  // The same size, written again: the modification time tells.
  dir.file("t.bin", ids_bytes(std::vector<uint32_t>(1000, 4), 2));
  const TokenFile again(path, 2, 256, 10, 0);
  touch_forward(path);
  EXPECT_THAT(run_error([&] { again.window(1, 10, w.data()); }), HasSubstr("(2000 bytes at start, now 2000, "));
}

TEST(ClickFile, AFileThatShrinksDuringTheRunIsAnErrorNotACrash) {
  TempDir dir;
  ModelConfig m;
  m.kind = "dlrm";
  m.tables = 2, m.table_rows = 10, m.bag_size = 1, m.dense_features = 1;
  const std::string path = dir.path("c.bin");
  write_clicks(ClickSource(m, 1.05, 1), 100, path);
  EXPECT_FALSE(std::filesystem::exists(OutputFile::temporary_for(path)));
  const ClickFile file(path, m);
  EXPECT_EQ(file.records(), 100);
  file.microbatch(10, 10, 0, 0);
  std::filesystem::resize_file(path, 64);
  EXPECT_THAT(run_error([&] { file.microbatch(10, 10, 3, 0); }),
              HasSubstr("clicks file '" + path + "' changed during the run (3200 bytes at start, now 64)"));
}

TEST(TokenSidecar, RoundTripsAndRefusesWhatItCannotRead) {
  TokenSidecar s;
  s.dtype = "uint32", s.vocab = 256, s.tokens = 12, s.source = "my dir/book.txt", s.source_checksum = "00ff";
  const std::string text = to_json(s);
  EXPECT_THAT(text, HasSubstr("\"format\": \"loom-tokens\""));
  EXPECT_THAT(text, HasSubstr("\"version\": 1"));
  EXPECT_LT(text.find("\"format\""), text.find("\"dtype\"")) << "the documented order";
  EXPECT_EQ(parse_sidecar(text, "x.json"), s);
  EXPECT_EQ(s.token_bytes(), 4);
  // Fields a later version 1 adds are ignored.
  EXPECT_EQ(parse_sidecar(R"({"format": "loom-tokens", "version": 1, "dtype": "uint32", "vocab": 256,
                             "tokens": 12, "source": "my dir/book.txt", "source_checksum": "00ff", "extra": 3})",
                          "x.json"),
            s);
  EXPECT_THAT(input_error([] { parse_sidecar("{not json", "x.json"); }),
              HasSubstr("token sidecar 'x.json' is not a \"loom-tokens\" JSON object"));
  EXPECT_THAT(input_error([] { parse_sidecar(R"({"format": "other"})", "x.json"); }), HasSubstr("not a \"loom-tokens\""));
  EXPECT_THAT(input_error([] { parse_sidecar(R"({"format": "loom-tokens", "version": 2})", "x.json"); }),
              HasSubstr("version 2, newer than the version 1 this loom reads"));
  EXPECT_THAT(input_error([] { parse_sidecar(R"({"format": "loom-tokens", "version": 1, "dtype": "uint32"})", "x.json"); }),
              HasSubstr("lacks a field"));
  EXPECT_THAT(input_error([] {
                parse_sidecar(R"({"format": "loom-tokens", "version": 1, "dtype": "int8", "vocab": 1, "tokens": 1})",
                              "x.json");
              }),
              HasSubstr("dtype \"int8\""));
}

TEST(TokenSidecar, Fnv1aMatchesItsReferenceValuesInAnyPieces) {
  EXPECT_EQ(Fnv1a().hex(), "cbf29ce484222325");
  Fnv1a a;
  a.update("a");
  EXPECT_EQ(a.hex(), "af63dc4c8601ec8c");
  Fnv1a whole, pieces;
  whole.update("foobar");
  pieces.update("foo"), pieces.update("bar");
  EXPECT_EQ(whole.hex(), "85944171f73967e8");
  EXPECT_EQ(pieces.value(), whole.value());
}

TEST(PrepareTokens, WritesTheSidecarBesideTheFile) {
  TempDir dir;
  const std::string text = dir.file("in.txt", "foobar");
  const std::string out = dir.path("out.bin");
  const TokenSidecar written = write_byte_tokens({text, "--text"}, {out, "--out"}, 4);
  const std::optional<TokenSidecar> read = read_sidecar(out);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, written);
  EXPECT_EQ(read->dtype, "uint32");
  EXPECT_EQ(read->tokens, 6);
  EXPECT_EQ(read->vocab, 256);
  EXPECT_EQ(read->source, text);
  EXPECT_EQ(read->source_checksum, "85944171f73967e8");
  EXPECT_EQ(token_width(out, "auto", 256), 4);
  // Prepared again as uint16: both files replaced, and they agree.
  write_byte_tokens({text, "--text"}, {out, "--out"}, 2);
  EXPECT_EQ(read_sidecar(out)->dtype, "uint16");
  EXPECT_EQ(token_width(out, "auto", 256), 2);
  for (const std::string& p : {out, sidecar_path(out)})
    EXPECT_FALSE(std::filesystem::exists(OutputFile::temporary_for(p))) << p;
}

TEST(PrepareTokens, RefusesBadInputBeforeWritingAnything) {
  TempDir dir;
  const std::string text = dir.file("in.txt", "some text");
  EXPECT_THAT(input_error([&] { write_byte_tokens({text, "--text"}, {text, "--out"}, 2); }),
              HasSubstr("--out '" + text + "' is the same file as --text '" + text + "'"));
  EXPECT_EQ(contents(text), "some text");
  const std::string json = dir.file("x.json", "{}");  // the sidecar of --out x
  EXPECT_THAT(input_error([&] { write_byte_tokens({json, "--text"}, {dir.path("x"), "--out"}, 2); }),
              HasSubstr("--out (its sidecar .json) '" + json + "' is the same file as --text"));
  EXPECT_EQ(contents(json), "{}");
  EXPECT_THAT(input_error([&] { write_byte_tokens({dir.path(""), "--text"}, {dir.path("o.bin"), "--out"}, 2); }),
              HasSubstr("is a directory"));
  EXPECT_THAT(input_error([&] { write_byte_tokens({dir.file("empty.txt", ""), "--text"}, {dir.path("o.bin"), "--out"}, 2); }),
              HasSubstr("is empty"));
  EXPECT_THAT(input_error([&] { write_byte_tokens({text, "--text"}, {dir.path("sub/"), "--out"}, 2); }),
              HasSubstr("names a directory"));
  std::filesystem::create_directories(dir.path("sub"));
  EXPECT_THAT(input_error([&] { write_byte_tokens({text, "--text"}, {dir.path("sub"), "--out"}, 2); }),
              HasSubstr("is a directory"));
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path(""))) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"in.txt", "x.json", "empty.txt", "sub"}));
}

TEST(TokenWidth, AutoReadsTheSidecarAndOtherwiseOnlyWhatTheFileProves) {
  TempDir dir;
  const std::string small = ids_bytes({1, 2, 3, 4}, 4);  // 16 bytes: uint32 1..4, or uint16 1,0,2,0,...
  const std::string path = dir.file("t.bin", small);
  // No sidecar: ambiguous, refused with how to say it.
  EXPECT_THAT(input_error([&] { token_width(path, "auto", 256); }),
              HasSubstr("could hold uint16 or uint32 ids, and data.token_dtype = \"auto\" cannot tell which; hint: "
                        "state it, e.g. --set data.token_dtype=uint16 (or uint32), or write the file with `loom data "
                        "prepare`"));
  EXPECT_EQ(token_width(path, "uint32", 256), 4);
  EXPECT_EQ(token_width(path, "uint16", 256), 2);
  // Sizes that only uint16 explains; ids that as uint32 would be past the vocab.
  EXPECT_EQ(token_width(dir.file("six.bin", ids_bytes({1, 2, 3}, 2)), "auto", 256), 2);
  EXPECT_EQ(token_width(dir.file("u16.bin", ids_bytes({1, 2, 3, 4}, 2)), "auto", 256), 2);  // 0x00020001 >= 256
  EXPECT_EQ(token_width(dir.file("empty.bin", ""), "auto", 256), 2);  // then "holds 0 tokens"
  // With a sidecar: its dtype; one that disagrees with the file or with token_dtype is refused.
  TokenSidecar s;
  s.dtype = "uint32", s.vocab = 256, s.tokens = 4;
  dir.file("t.bin.json", to_json(s));
  EXPECT_EQ(token_width(path, "auto", 256), 4);
  EXPECT_EQ(token_width(path, "uint32", 256), 4);
  EXPECT_THAT(input_error([&] { token_width(path, "uint16", 256); }),
              HasSubstr("data.token_dtype = \"uint16\", but the sidecar '" + path + ".json' of data file '" + path +
                        "' says its ids are uint32"));
  s.tokens = 5;
  dir.file("t.bin.json", to_json(s));
  EXPECT_THAT(input_error([&] { token_width(path, "auto", 256); }),
              HasSubstr("has 16 bytes, but its sidecar '" + path + ".json' says 5 uint32 tokens (5 x 4 bytes): the "
                        "file changed since it was prepared"));
  dir.file("t.bin.json", "[]");
  EXPECT_THAT(input_error([&] { token_width(path, "auto", 256); }), HasSubstr("is not a \"loom-tokens\""));
}

TEST(Sampler, SameSamplesWhateverTheMicroBatchSplit) {
  const MarkovSource source(97, 3);
  // One micro-batch of 4 against four micro-batches of 1: the same rows in the same order.
  const nn::MicroBatch whole = make_microbatch(source, {4, 4, 16}, 2, 0);
  for (int64_t m = 0; m < 4; ++m) {
    const nn::MicroBatch part = make_microbatch(source, {4, 1, 16}, 2, m);
    EXPECT_TRUE(at::equal(part.tokens[0], whole.tokens[m]));
    EXPECT_TRUE(at::equal(part.targets[0], whole.targets[m]));
    EXPECT_DOUBLE_EQ(part.loss_scale, whole.loss_scale);
  }
  // Targets are the next tokens.
  EXPECT_TRUE(at::equal(whole.tokens.narrow(1, 1, 15), whole.targets.narrow(1, 0, 15)));
  EXPECT_DOUBLE_EQ(whole.loss_scale, 1.0 / 64);
  // Steps see different samples.
  EXPECT_FALSE(at::equal(make_microbatch(source, {4, 4, 16}, 3, 0).tokens, whole.tokens));
}

}  // namespace
}  // namespace loom::data

// Data sources and the global sampler: deterministic, exact file formats, clear refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <unistd.h>

#include "loom/core/error.h"
#include "loom/data/markov_source.h"
#include "loom/data/sampler.h"
#include "loom/data/token_file.h"

namespace loom::data {
namespace {

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("loom_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name, const std::string& bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

std::string input_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
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
    EXPECT_EQ(write_byte_tokens(text, out, width), 26);
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

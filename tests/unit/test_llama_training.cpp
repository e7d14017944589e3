// The Llama kind trained end to end in one process: the loss falls on the synthetic chain and on
// a byte-level text file, with grouped kv heads and with the head tied to the token table; and
// its config checks, each one InputError naming the values and a hint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gmock/gmock.h>

#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/registry.h"
#include "loom/train/trainer.h"
#include "tiny_configs.h"

namespace loom::train {
namespace {

// A small Llama: 4 query heads sharing 2 kv heads, SwiGLU hidden 96 (ffn_multiple_of 16), trained
// 40 steps in float32 with the default gradient buckets and table path (auto).
Config small_llama(int64_t vocab, bool tied) {
  Config c = test::small_llama(vocab, /*n_layers=*/2, /*seq_len=*/32, /*global_batch=*/4, /*micro_batch=*/2,
                               /*kv_heads=*/2, tied);
  c.model.n_heads = 4;
  c.train.steps = 40;
  c.train.warmup = 4;
  c.model.dtype = "float32";
  c.parallel.bucket_mb = 25;
  c.parallel.sparse = SparseMode::Auto;
  return c;
}

// The first step's loss and the mean of the last five.
std::pair<double, double> first_and_last(const Config& c) {
  dist::NullCommunicator world;
  Trainer trainer(c, world);
  const std::vector<StepRecord> r = trainer.run({.peak_flops = 1e9});
  double last = 0;
  for (size_t i = r.size() - 5; i < r.size(); ++i) last += r[i].loss / 5;
  for (const StepRecord& s : r) EXPECT_TRUE(std::isfinite(s.loss) && std::isfinite(s.grad_norm));
  return {r.front().loss, last};
}

class LlamaTraining : public ::testing::TestWithParam<bool> {};  // tied head

TEST_P(LlamaTraining, LossFallsOnTheSyntheticChain) {
  const auto [first, last] = first_and_last(small_llama(64, GetParam()));
  EXPECT_NEAR(first, std::log(64.0), 0.3) << "an untrained model predicts about uniformly";
  EXPECT_LT(last, first - 1.0);
}

TEST_P(LlamaTraining, LossFallsOnATextFile) {
  // One file per case and process: ctest runs the tied and untied cases at the same time.
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     fmt::format("loom_llama_text_{}_{}.txt", GetParam() ? "tied" : "untied", getpid());
  {
    std::ofstream out(path);
    for (int i = 0; i < 200; ++i)
      out << "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs " << i % 7 << ".\n";
  }
  Config c = small_llama(256, GetParam());
  c.data.source = "text:" + path.string();
  const auto [first, last] = first_and_last(c);
  std::filesystem::remove(path);
  EXPECT_NEAR(first, std::log(256.0), 0.3);
  EXPECT_LT(last, first - 1.5) << "a repetitive text is easy to predict";
}

std::string refusal(const std::function<void(Config&)>& change) {
  Config c = small_llama(64, false);
  change(c);
  try {
    models::validate_config(c);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LlamaConfig, RefusesWhatALlamaCannotBeWithTheValuesAndAHint) {
  using ::testing::HasSubstr;
  EXPECT_EQ(refusal([](Config&) {}), "(accepted)");
  EXPECT_THAT(refusal([](Config& c) { c.model.n_kv_heads = 3; }),
              HasSubstr("model.n_heads (4) must be a multiple of model.n_kv_heads (3)"));
  EXPECT_THAT(refusal([](Config& c) { c.model.max_positions = 64; }),
              HasSubstr("model.max_positions = 64 sizes a learned position table"));
  EXPECT_THAT(refusal([](Config& c) { c.model.tie_embeddings = true, c.parallel.pp = 2; }),
              HasSubstr("hint: set model.tie_embeddings = false to pipeline"));
  EXPECT_THAT(refusal([](Config& c) { c.model.n_heads = 8, c.model.d_model = 24, c.model.n_kv_heads = 0; }),
              HasSubstr("24 / 8 = 3 must be even"));
  EXPECT_THAT(refusal([](Config& c) { c.model.rope_theta = 1; }), HasSubstr("model.rope_theta = 1 must be"));
  EXPECT_THAT(refusal([](Config& c) { c.model.ffn_multiple_of = 0; }), HasSubstr("model.ffn_multiple_of = 0"));
  EXPECT_THAT(refusal([](Config& c) { c.parallel.tp = 4; }),
              HasSubstr("model.n_kv_heads (2) must be divisible by parallel.tp (4)"));
  EXPECT_THAT(refusal([](Config& c) { c.model.kind = "gpt"; }), HasSubstr("applies to model.kind = \"llama\""));
}

INSTANTIATE_TEST_SUITE_P(Head, LlamaTraining, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Tied" : "Untied"; });

}  // namespace
}  // namespace loom::train

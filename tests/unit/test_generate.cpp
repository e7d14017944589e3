// Generation (issue 18): decoding with a key/value cache against the full causal forward, the
// samplers, a checkpoint read back into a serial model, and the `--choices` files refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "loom/blocks/lm_head_loss.h"
#include "loom/ckpt/box.h"
#include "loom/ckpt/checkpointer.h"
#include "loom/core/config.h"
#include "loom/data/tokenizer.h"
#include "loom/dist/null_communicator.h"
#include "loom/generate/choices.h"
#include "loom/generate/decoder.h"
#include "loom/generate/load_model.h"
#include "loom/generate/sampling.h"
#include "loom/models/registry.h"
#include "loom/nn/precision.h"
#include "tiny_configs.h"
#include "unit/input_error.h"
#include "unit/temp_dir.h"

namespace loom {
namespace {

using testing::input_error;

struct Shape {
  std::string kind;
  int64_t kv_heads = 0;
  bool tied = false;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.kind << " kv_heads " << s.kv_heads << (s.tied ? " tied" : ""); }

// small_gpt's or small_llama's model (only `.model` is used: the batch sizes 1, 1 are placeholders)
// with 4 query heads, and the Llama's SwiGLU hidden rounded to 8.
ModelConfig tiny(const Shape& s) {
  ModelConfig m = s.kind == "llama"
                      ? test::small_llama(53, /*n_layers=*/2, /*seq_len=*/24, 1, 1, s.kv_heads, s.tied).model
                      : test::small_gpt(53, /*n_layers=*/2, /*seq_len=*/24, 1, 1).model;
  m.n_heads = 4;
  m.attn_tile = 5;  // tiles that do not divide the sequence, so the cache's keys span several
  if (s.kind == "llama") m.ffn_multiple_of = 8;
  return m;
}

// Weights far from the small initial ones, so attention is sharp and every position matters.
models::Model build(const ModelConfig& m, dist::Communicator& tp) {
  models::Model model = models::model_kind(m.kind).build(m, {.tp = tp});
  model.initialise(11, at::kDouble);
  for (nn::Param* p : model.params())
    if (p->init == nn::Init::Normal) p->value.mul_(25);
  return model;
}

// The logits of every position from the chain's causal forward: the layers' forward up to the
// final norm, then the head's logits (what its loss is computed from). [B, T, vocab].
at::Tensor full_logits(models::Model& model, const at::Tensor& tokens) {
  nn::MicroBatch mb{.tokens = tokens, .targets = at::zeros_like(tokens)};
  at::Tensor x = tokens;
  for (size_t i = 0; i + 1 < model.chain.size(); ++i) {
    nn::Saved saved;
    x = model.chain[i]->forward(x, mb, saved);
  }
  auto& head = dynamic_cast<blocks::LmHeadLoss&>(*model.chain.back());
  return head.logits(x.reshape({-1, x.size(-1)})).view({x.size(0), x.size(1), -1});
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

class GenerateDecoding : public ::testing::TestWithParam<Shape> {};

// The prompt in one pass, then one token at a time (and once three at a time): every position's
// logits equal the full causal forward's within float64 reassociation.
TEST_P(GenerateDecoding, CachedDecodingEqualsFullRecomputation) {
  const ModelConfig m = tiny(GetParam());
  dist::NullCommunicator tp;
  models::Model model = build(m, tp);
  at::manual_seed(5);
  const at::Tensor tokens = at::randint(m.vocab, {2, m.seq_len}, at::kLong);
  const at::Tensor want = full_logits(model, tokens);
  generate::Decoder decoder(model, m.seq_len);
  std::vector<at::Tensor> parts{decoder.feed(tokens.narrow(1, 0, 7))};
  parts.push_back(decoder.feed(tokens.narrow(1, 7, 3)));
  for (int64_t t = 10; t < m.seq_len; ++t) parts.push_back(decoder.feed(tokens.narrow(1, t, 1)));
  const at::Tensor got = at::cat(parts, 1);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LT(relative_error(got, want), 1e-9);
  EXPECT_EQ(decoder.position(), m.seq_len);
  // The check can fail: logits of a shifted sequence (the cache of another prefix) differ.
  generate::Decoder shifted(model, m.seq_len);
  shifted.feed(tokens.narrow(1, 1, 1));
  EXPECT_GT(relative_error(shifted.feed(tokens.narrow(1, 1, m.seq_len - 1)), want.narrow(1, 1, m.seq_len - 1)), 1e-3);
  // Past the context the decoder refuses.
  EXPECT_THROW(decoder.feed(tokens.narrow(1, 0, 1)), Error);
}

INSTANTIATE_TEST_SUITE_P(GenerateKinds, GenerateDecoding,
                         ::testing::Values(Shape{"gpt"}, Shape{"llama", 2, false}, Shape{"llama", 1, true}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return s.kind + (s.kind == "llama" ? fmt::format("Kv{}{}", s.kv_heads, s.tied ? "Tied" : "")
                                                             : "");
                         });

TEST(GenerateDecoding, DlrmCannotDecode) {
  ModelConfig m;
  m.kind = "dlrm";
  dist::NullCommunicator tp;
  const models::Model model = models::model_kind("dlrm").build(m, {.tp = tp});
  EXPECT_FALSE(generate::first_undecodable(model).empty());
  ModelConfig gpt = tiny({"gpt"});
  EXPECT_EQ(generate::first_undecodable(models::model_kind("gpt").build(gpt, {.tp = tp})), "");
}

// Greedy generation is the argmax of the full forward's last position, token after token; past
// the context, of the full forward over the sequence's last `context` tokens (NOTE [Sliding window]).
TEST(GenerateLoop, GreedyFollowsTheFullForwardAndSlidesPastTheContext) {
  const ModelConfig m = tiny({"llama", 2, false});
  dist::NullCommunicator tp;
  models::Model model = build(m, tp);
  const std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  std::vector<int64_t> streamed;
  const int64_t count = m.seq_len + 12;
  const generate::GenerateResult r = generate::generate(model, m.seq_len, prompt,
                                                        {.max_tokens = count, .sampling = {.temperature = 0}},
                                                        [&](int64_t id) { streamed.push_back(id); });
  EXPECT_EQ(streamed, r.tokens);
  ASSERT_EQ(static_cast<int64_t>(r.tokens.size()), count);
  EXPECT_EQ(r.first_slid, m.seq_len + 1 - static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(r.prompt_dropped, 0);
  std::vector<int64_t> sequence = prompt;
  for (int64_t token : r.tokens) {
    const auto n = static_cast<int64_t>(sequence.size());
    const std::vector<int64_t> window(sequence.end() - std::min(n, m.seq_len), sequence.end());
    const at::Tensor logits = full_logits(model, at::tensor(window, at::kLong).view({1, -1}));
    ASSERT_EQ(logits[0][-1].argmax().item<int64_t>(), token) << "token " << n - 5;
    sequence.push_back(token);
  }
  // Recomputing per token chooses the same tokens.
  const generate::GenerateResult again = generate::generate(
      model, m.seq_len, prompt, {.max_tokens = 6, .sampling = {.temperature = 0}, .recompute = true}, [](int64_t) {});
  EXPECT_EQ(again.tokens, std::vector<int64_t>(r.tokens.begin(), r.tokens.begin() + 6));
  EXPECT_EQ(again.first_slid, -1);
  // Ids at or past id_limit are never chosen.
  const generate::GenerateResult limited = generate::generate(
      model, m.seq_len, prompt, {.max_tokens = 10, .sampling = {.temperature = 0}, .id_limit = 2}, [](int64_t) {});
  for (int64_t id : limited.tokens) EXPECT_LT(id, 2);
}

// A prompt longer than the context is read from its last `context` tokens.
TEST(GenerateLoop, PromptBeyondTheContextIsReadFromItsEnd) {
  const ModelConfig m = tiny({"gpt"});
  dist::NullCommunicator tp;
  models::Model model = build(m, tp);
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < m.seq_len + 3; ++i) prompt.push_back((i * 7 + 3) % 11);
  const generate::GenerateOptions greedy{.max_tokens = 4, .sampling = {.temperature = 0}};
  const generate::GenerateResult whole = generate::generate(model, m.seq_len, prompt, greedy, [](int64_t) {});
  const generate::GenerateResult tail = generate::generate(
      model, m.seq_len, std::vector<int64_t>(prompt.begin() + 3, prompt.end()), greedy, [](int64_t) {});
  EXPECT_EQ(whole.prompt_dropped, 3);
  EXPECT_EQ(tail.prompt_dropped, 0);
  EXPECT_EQ(whole.tokens, tail.tokens);
  EXPECT_EQ(whole.first_slid, 1);
  EXPECT_NE(input_error([&] { generate::check_prompt(0); }).find("--prompt is empty"), std::string::npos);
}

at::Tensor nonzero_ids(const at::Tensor& p) { return p.nonzero().view({-1}); }

TEST(GenerateSampling, GreedyIsTheFirstArgmax) {
  generate::Sampler greedy({.temperature = 0});
  EXPECT_EQ(greedy.next(at::tensor({0.5, 2.0, -1.0, 2.0}, at::kDouble)), 1);
  EXPECT_EQ(greedy.next(at::tensor({3.0f, 2.0f, 1.0f})), 0);
}

TEST(GenerateSampling, TopKAndTopPKeepTheRightIds) {
  const at::Tensor logits = at::tensor({0.5, 0.3, 0.15, 0.05}, at::kDouble).log();
  auto kept = [&](generate::SamplingOptions o) { return nonzero_ids(generate::sampling_distribution(logits, o)); };
  EXPECT_TRUE(at::equal(kept({}), at::arange(4, at::kLong)));
  EXPECT_TRUE(at::equal(kept({.top_k = 2}), at::tensor({0, 1}, at::kLong)));
  EXPECT_TRUE(at::equal(kept({.top_p = 0.5}), at::tensor({0}, at::kLong)));       // 0.5 reaches 0.5
  EXPECT_TRUE(at::equal(kept({.top_p = 0.7}), at::tensor({0, 1}, at::kLong)));     // 0.5 < 0.7 <= 0.8
  EXPECT_TRUE(at::equal(kept({.top_p = 0.81}), at::tensor({0, 1, 2}, at::kLong)));
  EXPECT_TRUE(at::equal(kept({.top_p = 0.01}), at::tensor({0}, at::kLong)));       // always the most likely
  // top_k first, then top_p of what it kept: 0.5 / 0.8 = 0.625 reaches 0.6.
  EXPECT_TRUE(at::equal(kept({.top_k = 2, .top_p = 0.6}), at::tensor({0}, at::kLong)));
  // Kept probabilities are renormalised; the temperature sharpens them.
  const at::Tensor p = generate::sampling_distribution(logits, {.top_k = 2});
  EXPECT_NEAR(p[0].item<double>(), 0.625, 1e-12);
  const at::Tensor cold = generate::sampling_distribution(logits, {.temperature = 0.5});
  EXPECT_NEAR(cold[0].item<double>(), 0.25 / (0.25 + 0.09 + 0.0225 + 0.0025), 1e-12);
  // Equal probabilities at the cut: the lower id stays.
  const at::Tensor tied = generate::sampling_distribution(at::tensor({1.0, 2.0, 2.0, 0.0}, at::kDouble), {.top_k = 1});
  EXPECT_TRUE(at::equal(nonzero_ids(tied), at::tensor({1}, at::kLong)));
}

TEST(GenerateSampling, ASeedRepeatsAndDrawsFollowTheDistribution) {
  const at::Tensor logits = at::tensor({0.1, 0.2, 0.3, 0.4}, at::kDouble).log();
  auto draws = [&](uint64_t seed, int n) {
    generate::Sampler s({.top_p = 1.0, .seed = seed});
    std::vector<int64_t> out;
    for (int i = 0; i < n; ++i) out.push_back(s.next(logits));
    return out;
  };
  EXPECT_EQ(draws(7, 64), draws(7, 64));
  EXPECT_NE(draws(7, 64), draws(8, 64));
  const std::vector<int64_t> many = draws(3, 10000);
  std::vector<double> counts(4, 0);
  for (int64_t id : many) counts[static_cast<size_t>(id)] += 1;
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / 10000, 0.1 * static_cast<double>(i + 1), 0.02) << i;
  // Under top-k only the kept ids are drawn.
  generate::Sampler top({.top_k = 2, .seed = 1});
  for (int i = 0; i < 200; ++i) EXPECT_GE(top.next(logits), 2);
}

TEST(GenerateSampling, BadValuesAreRefused) {
  EXPECT_NE(input_error([] { generate::check_sampling({.temperature = -0.5}); }).find("--temperature -0.5"),
            std::string::npos);
  EXPECT_NE(input_error([] { generate::check_sampling({.top_k = -1}); }).find("--top-k -1"), std::string::npos);
  EXPECT_NE(input_error([] { generate::check_sampling({.top_p = 0}); }).find("--top-p 0"), std::string::npos);
  EXPECT_NE(input_error([] { generate::check_sampling({.top_p = 1.5}); }).find("--top-p 1.5"), std::string::npos);
}

// A serial run's checkpoint read back: every parameter equals the saved one, bit for bit, and
// the saved config builds the model.
TEST(GenerateLoad, ACheckpointLoadsIntoASerialModel) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("loom-unit-generate-{}", ::getpid());
  fs::remove_all(dir);
  Config config;
  config.model = tiny({"llama", 2, true});
  dist::NullCommunicator world;
  models::Model model = build(config.model, world);
  std::vector<ckpt::TensorPiece> pieces;
  for (nn::Param* p : model.params())
    pieces.push_back({.name = p->name, .full_shape = p->full_shape, .box = ckpt::whole(p->full_shape), .data = p->value});
  {
    ckpt::Checkpointer saver({.dir = dir.string()}, world);
    saver.save({.step = 3, .config = to_toml(config)}, pieces);
    saver.finish();
  }
  const generate::LoadedModel loaded = generate::load_model(dir.string());  // the checkpoint.dir: its latest
  EXPECT_EQ(loaded.step, 3);
  EXPECT_EQ(loaded.context(), config.model.seq_len);
  const std::vector<nn::Param*> want = model.params(), got = loaded.model.params();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->name, want[i]->name);
    EXPECT_TRUE(at::equal(got[i]->value, want[i]->value)) << got[i]->name;
  }
  // Synthetic data names no tokenizer.
  EXPECT_NE(input_error([&] { generate::run_tokenizer(loaded.config, ""); }).find("--tokenizer"), std::string::npos);
  fs::remove_all(dir);
  EXPECT_NE(input_error([&] { generate::load_model(dir.string()); }).find(dir.string()), std::string::npos);
}

// A --choices file is read and checked whole before anything is scored, so a model that was never
// loaded serves: each malformed line is refused naming FILE:LINE and what is wrong with it (cut
// short, an answer written as text, no "choices", an answer past the choices, a choice not a text).
TEST(GenerateChoices, RefusesMalformedLinesNamingTheFileAndLine) {
  using ::testing::HasSubstr;
  const loom::testing::TempDir dir("loom_choices_");
  generate::LoadedModel model;
  const std::unique_ptr<data::Tokenizer> bytes = data::byte_tokenizer();
  const std::string path = dir.path("q.jsonl");
  const auto refusal = [&](const std::string& text) {
    dir.file("q.jsonl", text);
    return input_error([&] { generate::score_choices(model, *bytes, path); });
  };
  const std::string good = R"({"context": "2 + 2 =", "choices": [" 4", " 5"], "answer": 0})" "\n";
  EXPECT_THAT(refusal(good + R"({"context": "x", "choices": [" a")"),
              HasSubstr(path + ":2: not an object of \"context\""));
  EXPECT_THAT(refusal(R"({"context": "x", "choices": [" a", " b"], "answer": "1"})"),
              HasSubstr(path + ":1: not an object"));
  EXPECT_THAT(refusal(good + "\n" + R"({"context": "x", "answer": 0})"), HasSubstr(path + ":3: not an object"));
  EXPECT_THAT(refusal(R"({"context": "x", "choices": [" a", " b"], "answer": 2})"),
              HasSubstr(path + ":1: \"answer\" 2 is not the index of one of its 2 choices"));
  EXPECT_THAT(refusal(good + R"({"context": "x", "choices": [" a", 7], "answer": 0})"),
              HasSubstr(path + ":2: a choice is 7, not a text"));
}

}  // namespace
}  // namespace loom

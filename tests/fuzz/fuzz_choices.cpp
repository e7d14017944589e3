// `loom eval --choices` JSONL (generate/choices.h, NOTE [Multiple choice]): the file read and
// checked whole, then every choice scored. The reader has no entry point of its own (it is the
// first half of score_choices), so the target scores with a model of its own: one layer whose
// logits are all zero, over a context of 256 positions, with the byte tokenizer. Every token then
// has log-probability -log(256) whatever the text, so scoring is cheap and its result known, and
// no checkpoint is needed (no model folder is linked). Input: the JSONL file's bytes.
// Contract (NOTE [Reader contract]) plus: one question per line that is not blank, with that line's
// answer and as many scores as choices, each over the choice's bytes (the byte tokenizer's tokens)
// at -log(256) a token; and no more questions counted right than there are.
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/core/text.h"
#include "loom/data/tokenizer.h"
#include "loom/generate/choices.h"
#include "loom/nn/decode.h"

namespace {

constexpr int64_t kVocab = 256;    // the byte tokenizer's
constexpr int64_t kContext = 256;  // a choice of more bytes is refused (it does not fit)

// Logits of zero for every position: decoding only, the one thing scoring asks of a layer.
class ZeroLogits final : public loom::nn::Layer, public loom::nn::Decodable {
 public:
  std::string name() const override { return "zero_logits"; }
  at::Tensor forward(const at::Tensor&, const loom::nn::MicroBatch&, loom::nn::Saved&) override {
    loom::fuzz::fail("scoring ran a training forward");
  }
  at::Tensor backward_input(const at::Tensor&, loom::nn::Saved&) override {
    loom::fuzz::fail("scoring ran a backward");
  }
  void backward_weight(loom::nn::Saved&) override { loom::fuzz::fail("scoring ran a backward"); }
  std::vector<loom::nn::Param*> params() override { return {}; }
  loom::nn::Cost cost(int64_t, int64_t, int64_t) const override { return {}; }
  at::Tensor decode(const at::Tensor& x, int64_t, loom::nn::DecodeCache&) override {
    return at::zeros({x.size(0), x.size(1), kVocab}, at::kFloat);
  }
};

// The model, made once: the layer keeps nothing between calls.
loom::generate::LoadedModel& model() {
  static loom::generate::LoadedModel m = [] {
    loom::generate::LoadedModel out;
    out.config.model.seq_len = kContext;
    out.config.model.max_positions = 0;
    out.model.chain.push_back(std::make_unique<ZeroLogits>());
    return out;
  }();
  return m;
}

void check(std::string_view input) {
  const std::unique_ptr<loom::data::Tokenizer> tokenizer = loom::data::byte_tokenizer();
  const loom::generate::ChoiceResult r =
      loom::generate::score_choices(model(), *tokenizer, loom::fuzz::Scratch::write("choices.jsonl", input));
  // The file's lines as the reader takes them; each that is not blank is a question, and parsed.
  std::istringstream in{std::string(input)};
  size_t q = 0;
  for (std::string line; std::getline(in, line);) {
    if (loom::is_blank(line)) continue;
    loom::fuzz::require(q < r.questions.size(), "fewer questions than lines");
    const loom::generate::ChoiceScores& s = r.questions[q++];
    const nlohmann::json j = nlohmann::json::parse(line);
    const nlohmann::json& choices = j.at("choices");
    loom::fuzz::require(s.answer == j.at("answer").get<int64_t>(), "a question's answer is not its line's");
    loom::fuzz::require(s.loglik.size() == choices.size() && s.tokens.size() == choices.size(),
                        "a question's scores are not one per choice");
    for (size_t i = 0; i < choices.size(); ++i) {
      const auto n = static_cast<int64_t>(choices[i].get<std::string>().size());
      loom::fuzz::require(s.tokens[i] == n, "a choice's tokens are not its bytes");
      loom::fuzz::require(std::isfinite(s.loglik[i]) &&
                              std::abs(s.loglik[i] + static_cast<double>(n) * std::log(static_cast<double>(kVocab))) <=
                                  1e-9 * static_cast<double>(n),
                          "a choice's log-likelihood is not -log(256) a token");
    }
  }
  loom::fuzz::require(q == r.questions.size(), "more questions than lines");
  const auto questions = static_cast<int64_t>(q);
  loom::fuzz::require(r.correct >= 0 && r.correct <= questions && r.correct_norm >= 0 && r.correct_norm <= questions,
                      "more questions right than there are");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}

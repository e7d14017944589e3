#include "loom/generate/choices.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/generate/decoder.h"

namespace loom::generate {
namespace {

struct Question {
  std::vector<int64_t> context;
  std::vector<std::vector<int64_t>> choices;
  int64_t answer = 0;
};

std::vector<Question> read_questions(const std::string& path, const data::Tokenizer& tokenizer) {
  std::ifstream in(path);
  LOOM_CHECK_INPUT(in.good(), "--choices {} cannot be read", path);
  std::vector<Question> out;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (is_blank(line)) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = path + ":" + std::to_string(line_no);
    LOOM_CHECK_INPUT(j.is_object() && j.contains("context") && j["context"].is_string() && j.contains("choices") &&
                         j["choices"].is_array() && !j["choices"].empty() && j.contains("answer") &&
                         j["answer"].is_number_integer(),
                     "{}: not an object of \"context\" (text), \"choices\" (a list of texts) and \"answer\" (the "
                     "right choice's index)", where);
    Question q{.context = tokenizer.encode(j["context"].get<std::string>()), .answer = j["answer"].get<int64_t>()};
    LOOM_CHECK_INPUT(q.answer >= 0 && q.answer < static_cast<int64_t>(j["choices"].size()),
                     "{}: \"answer\" {} is not the index of one of its {} choices", where, q.answer, j["choices"].size());
    LOOM_CHECK_INPUT(!q.context.empty(), "{}: the context is empty once tokenized: a choice needs a token before it",
                     where);
    for (const auto& c : j["choices"]) {
      LOOM_CHECK_INPUT(c.is_string(), "{}: a choice is {}, not a text", where, c.dump());
      q.choices.push_back(tokenizer.encode(c.get<std::string>()));
      LOOM_CHECK_INPUT(!q.choices.back().empty(), "{}: choice {} is empty once tokenized", where, c.dump());
    }
    out.push_back(std::move(q));
  }
  LOOM_CHECK_INPUT(!out.empty(), "--choices {} holds no question", path);
  return out;
}

// The log-likelihood of `choice` after `context`: one pass over their concatenation (the last
// positions of it when it is longer than the model's context).
double loglik(LoadedModel& m, const std::vector<int64_t>& context, const std::vector<int64_t>& choice) {
  std::vector<int64_t> ids = context;
  ids.insert(ids.end(), choice.begin(), choice.end());
  const auto keep = static_cast<size_t>(std::min<int64_t>(m.context() + 1, static_cast<int64_t>(ids.size())));
  LOOM_CHECK_INPUT(choice.size() < keep, "a choice of {} tokens does not fit the model's context of {} positions",
                   choice.size(), m.context());
  ids.erase(ids.begin(), ids.end() - static_cast<long>(keep));
  const at::Tensor all = at::tensor(ids, at::kLong).unsqueeze(0);
  const int64_t n = all.size(1) - 1;
  Decoder decoder(m.model, m.context());
  const at::Tensor logp = decoder.feed(all.narrow(1, 0, n)).to(at::kDouble).log_softmax(-1);
  const auto c = static_cast<int64_t>(choice.size());
  return logp.narrow(1, n - c, c).gather(-1, all.narrow(1, n + 1 - c, c).unsqueeze(-1)).sum().item<double>();
}

}  // namespace

// NOTE [Multiple choice]: a choice's score is the sum of the log-probabilities of its tokens given
// the context's tokens and its own before them, computed in float64 from the logits; the context
// and the choice are tokenized apart (a choice written with its leading space, " Paris", is the
// same tokens after any context). A question counts as right when its answer scores highest
// ("accuracy"), and, divided by each choice's token count, highest per token ("accuracy_norm").
ChoiceResult score_choices(LoadedModel& m, const data::Tokenizer& tokenizer, const std::string& path) {
  const std::vector<Question> questions = read_questions(path, tokenizer);
  ChoiceResult r;
  for (const Question& q : questions) {
    ChoiceScores s{.answer = q.answer};
    for (const auto& choice : q.choices) {
      s.loglik.push_back(loglik(m, q.context, choice));
      s.tokens.push_back(static_cast<int64_t>(choice.size()));
    }
    size_t best = 0, best_norm = 0;
    for (size_t i = 1; i < s.loglik.size(); ++i) {
      if (s.loglik[i] > s.loglik[best]) best = i;
      if (s.loglik[i] / s.tokens[i] > s.loglik[best_norm] / s.tokens[best_norm]) best_norm = i;
    }
    r.correct += static_cast<int64_t>(best) == q.answer;
    r.correct_norm += static_cast<int64_t>(best_norm) == q.answer;
    r.questions.push_back(std::move(s));
  }
  return r;
}

}  // namespace loom::generate

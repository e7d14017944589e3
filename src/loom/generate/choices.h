#pragma once
// `loom eval --choices` (NOTE [Multiple choice]): a checkpoint judged on questions of a JSONL file,
// one {"context": TEXT, "choices": [TEXT, ...], "answer": INDEX} per line, by the log-likelihood
// of each choice given its context.
#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/tokenizer.h"
#include "loom/generate/load_model.h"

namespace loom::generate {

struct ChoiceScores {
  std::vector<double> loglik;  // per choice: the sum of its tokens' log-probabilities
  std::vector<int64_t> tokens;  // per choice: its tokens
  int64_t answer = 0;
};

struct ChoiceResult {
  std::vector<ChoiceScores> questions;
  int64_t correct = 0;       // the answer has the highest log-likelihood
  int64_t correct_norm = 0;  // ... per token of the choice
};

// Reads and checks the whole file first (InputError naming FILE:LINE for a line that is not such
// an object, has no choice, an answer out of range, or an empty context or choice once
// tokenized), then scores every choice.
ChoiceResult score_choices(LoadedModel& model, const data::Tokenizer& tokenizer, const std::string& path);

}  // namespace loom::generate

// `loom eval`: a checkpoint's loss and perplexity on a token file, and its accuracy on multiple-
// choice questions, in one process (a checkpoint of any layout).
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/generate/choices.h"
#include "loom/generate/evaluate.h"

namespace loom::cli {
namespace {

struct EvalFlags {
  std::string checkpoint, choices, tokenizer, scores;
  generate::EvalOptions options;
};

// The questions' outcome, and with --scores every choice's log-likelihood (one line per question).
nlohmann::json run_choices(generate::LoadedModel& model, const EvalFlags& f) {
  const std::unique_ptr<data::Tokenizer> tokenizer = generate::run_tokenizer(model.config, f.tokenizer);
  const generate::ChoiceResult r = generate::score_choices(model, *tokenizer, f.choices);
  if (!f.scores.empty()) {
    OutputFile out(f.scores);
    for (const generate::ChoiceScores& q : r.questions)
      out.write(nlohmann::json{{"loglik", q.loglik}, {"tokens", q.tokens}, {"answer", q.answer}}.dump() + "\n");
    out.commit();
  }
  const auto n = static_cast<double>(r.questions.size());
  return {{"questions", r.questions.size()}, {"accuracy", static_cast<double>(r.correct) / n},
          {"accuracy_norm", static_cast<double>(r.correct_norm) / n}};
}

}  // namespace

Action add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "a checkpoint's loss and perplexity on a token file, or its accuracy on "
                                         "multiple-choice questions (any layout, one process)");
  auto f = std::make_shared<EvalFlags>();
  cmd->add_option("--checkpoint", f->checkpoint, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")
      ->required();
  cmd->add_option("--data", f->options.data, "a token file of `loom data prepare` (or text:PATH, its bytes)");
  cmd->add_option("--seq", f->options.seq, "tokens each window predicts (0: the model's seq_len)");
  cmd->add_option("--batch", f->options.batch, "windows per forward pass");
  cmd->add_option("--windows", f->options.windows, "the most windows read (0: every whole one)");
  cmd->add_option("--logits", f->options.logits, "also write the first batch's ids and logits to this safetensors file");
  cmd->add_option("--choices", f->choices, "a JSONL file of {\"context\", \"choices\", \"answer\"}: the share of "
                                           "questions whose answer is the likeliest choice");
  cmd->add_option("--tokenizer", f->tokenizer, "--choices: a tokenizer instead of the run's (data.source's)");
  cmd->add_option("--scores", f->scores, "--choices: also write each choice's log-likelihood, a line per question");
  return [cmd, f](dist::Runtime&) {
    if (!*cmd) return;
    LOOM_CHECK_INPUT(!f->options.data.empty() || !f->choices.empty(),
                     "loom eval needs --data (a token file) or --choices (questions); hint: loom eval --help");
    std::vector<PathUse> inputs, outputs;
    if (!f->choices.empty()) inputs.push_back({f->choices, "--choices"});
    if (!f->scores.empty()) outputs.push_back({f->scores, "--scores"});
    check_output_paths(inputs, outputs);
    generate::LoadedModel model = generate::load_model(f->checkpoint);
    nlohmann::json out{{"checkpoint", model.dir}, {"step", model.step}};
    if (!f->options.data.empty()) {
      const generate::EvalResult r = generate::evaluate(model, f->options);
      out.update({{"windows", r.windows}, {"tokens", r.tokens}, {"loss", r.loss}, {"perplexity", r.perplexity}});
    }
    if (!f->choices.empty()) out.update(run_choices(model, *f));
    std::cout << out.dump() << "\n";
  };
}

}  // namespace loom::cli

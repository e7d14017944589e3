// `loom eval`: a checkpoint's loss and perplexity on a token file, and its accuracy on multiple-
// choice questions, in one process (a checkpoint of any layout). Every input is checked and every
// figure computed before an output (--logits, --scores) is written.
#include <nlohmann/json.hpp>

#include <iostream>

#include "commands.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/generate/choices.h"
#include "loom/generate/evaluate.h"

namespace loom::cli {
namespace {

struct EvalFlags {
  std::string checkpoint, choices, tokenizer, scores, logits;
  generate::EvalOptions options;
};

// The outputs against the inputs and each other, before anything is read.
void check_paths(const EvalFlags& f) {
  std::vector<PathUse> inputs, outputs;
  const std::string& data = f.options.data;
  if (!data.empty()) inputs.push_back({data.starts_with("text:") ? data.substr(5) : data, "--data"});
  if (!f.choices.empty()) inputs.push_back({f.choices, "--choices"});
  if (!f.tokenizer.empty()) inputs.push_back({f.tokenizer, "--tokenizer"});
  if (!f.logits.empty()) outputs.push_back({f.logits, "--logits"});
  if (!f.scores.empty()) outputs.push_back({f.scores, "--scores"});
  check_output_paths(inputs, outputs);
}

void write_scores(const std::string& path, const generate::ChoiceResult& r) {
  OutputFile out(path);
  for (const generate::ChoiceScores& q : r.questions)
    out.write(nlohmann::json{{"loglik", q.loglik}, {"tokens", q.tokens}, {"answer", q.answer}}.dump() + "\n");
  out.commit();
}

void run_eval(EvalFlags& f) {
  LOOM_CHECK_INPUT(!f.options.data.empty() || !f.choices.empty(),
                   "loom eval needs --data (a token file) or --choices (questions); hint: loom eval --help");
  LOOM_CHECK_INPUT(f.logits.empty() || !f.options.data.empty(), "--logits {} needs --data: they are its first batch's",
                   f.logits);
  LOOM_CHECK_INPUT(f.scores.empty() || !f.choices.empty(), "--scores {} needs --choices", f.scores);
  check_paths(f);
  generate::LoadedModel model = generate::load_model(f.checkpoint);
  nlohmann::json out{{"checkpoint", model.dir}, {"step", model.step}};
  generate::EvalResult r;
  generate::ChoiceResult c;
  if (!f.choices.empty()) {
    const std::unique_ptr<data::Tokenizer> tokenizer = generate::run_tokenizer(model.config, f.tokenizer);
    c = generate::score_choices(model, *tokenizer, f.choices);
    const auto n = static_cast<double>(c.questions.size());
    out.update({{"questions", c.questions.size()}, {"accuracy", static_cast<double>(c.correct) / n},
                {"accuracy_norm", static_cast<double>(c.correct_norm) / n}});
  }
  if (!f.options.data.empty()) {
    f.options.keep_logits = !f.logits.empty();
    r = generate::evaluate(model, f.options);
    out.update({{"windows", r.windows}, {"tokens", r.tokens}, {"loss", r.loss}, {"perplexity", r.perplexity}});
  }
  if (!f.logits.empty()) ckpt::write_tensor_file_replacing(f.logits, {{"ids", r.ids}, {"logits", r.logits.contiguous()}});
  if (!f.scores.empty()) write_scores(f.scores, c);
  std::cout << out.dump() << "\n";
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
  cmd->add_option("--logits", f->logits, "also write the first batch's ids and logits to this safetensors file");
  cmd->add_option("--choices", f->choices, "a JSONL file of {\"context\", \"choices\", \"answer\"}: the share of "
                                           "questions whose answer is the likeliest choice");
  cmd->add_option("--tokenizer", f->tokenizer, "--choices: a tokenizer instead of the run's (data.source's)");
  cmd->add_option("--scores", f->scores, "--choices: also write each choice's log-likelihood, a line per question");
  return [cmd, f](dist::Runtime&) {
    if (*cmd) run_eval(*f);
  };
}

}  // namespace loom::cli

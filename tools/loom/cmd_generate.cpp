// `loom generate`: text from a checkpoint of any layout, in one process (docs/generate.md).
#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/generate/decoder.h"
#include "loom/generate/load_model.h"

namespace loom::cli {
namespace {

struct GenerateFlags {
  std::string checkpoint, prompt, tokenizer;
  int64_t max_tokens = 64;
  generate::SamplingOptions sampling;
  bool no_cache = false, timing = false;
};

// Prints the text the growing id list adds, as each token arrives: the decoded sequence's new
// suffix (a token that ends inside a character prints the bytes it has).
class TextStream {
 public:
  TextStream(const data::Tokenizer& tokenizer, std::vector<int64_t> prompt)
      : tokenizer_(tokenizer), ids_(std::move(prompt)), shown_(tokenizer.decode(ids_)) {}
  void add(int64_t id) {
    ids_.push_back(id);
    std::string text = tokenizer_.decode(ids_);
    if (text.size() > shown_.size() && text.compare(0, shown_.size(), shown_) == 0)
      std::cout << std::string_view(text).substr(shown_.size()) << std::flush;
    shown_ = std::move(text);
  }

 private:
  const data::Tokenizer& tokenizer_;
  std::vector<int64_t> ids_;
  std::string shown_;
};

void run_generate(const GenerateFlags& f) {
  generate::check_sampling(f.sampling);
  LOOM_CHECK_INPUT(f.max_tokens >= 1, "--max-tokens {} must be >= 1", f.max_tokens);
  generate::LoadedModel loaded = generate::load_model(f.checkpoint);
  const std::unique_ptr<data::Tokenizer> tokenizer = generate::run_tokenizer(loaded.config, f.tokenizer);
  const std::vector<int64_t> prompt = tokenizer->encode(f.prompt);
  generate::check_prompt(static_cast<int64_t>(prompt.size()));
  TextStream stream(*tokenizer, prompt);
  const generate::GenerateResult r =
      generate::generate(loaded.model, loaded.context(), prompt,
                         {.max_tokens = f.max_tokens, .sampling = f.sampling, .id_limit = tokenizer->vocab(),
                          .recompute = f.no_cache},
                         [&](int64_t id) { stream.add(id); });
  std::cout << '\n' << std::flush;
  const auto n = static_cast<int64_t>(r.tokens.size());
  if (r.prompt_dropped > 0)
    std::cerr << fmt::format("loom: the prompt is {} tokens, longer than the model's context of {} positions: its "
                             "first {} were not read\n", prompt.size(), loaded.context(), r.prompt_dropped);
  if (r.first_slid >= 0)
    std::cerr << fmt::format("loom: the sequence filled the model's context of {} positions after {} tokens; the {} "
                             "after them were each chosen from the last {} tokens (a sliding window)\n",
                             loaded.context(), r.first_slid, n - r.first_slid, loaded.context());
  if (f.timing)
    std::cerr << fmt::format("loom: prompt {} tokens, prefill {:.2f} ms; {} more tokens in {:.2f} ms ({:.3f} "
                             "ms/token, {})\n", prompt.size(), r.prefill_seconds * 1e3, n - 1,
                             r.decode_seconds * 1e3, n > 1 ? r.decode_seconds * 1e3 / static_cast<double>(n - 1) : 0.0,
                             f.no_cache ? "recomputed" : "key/value cache");
}

}  // namespace

Action add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "continue a prompt with a trained checkpoint (any layout, one process)");
  auto f = std::make_shared<GenerateFlags>();
  cmd->add_option("--checkpoint", f->checkpoint, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")
      ->required();
  cmd->add_option("--prompt", f->prompt, "the text to continue")->required();
  cmd->add_option("--max-tokens", f->max_tokens, "tokens to generate (past the context, from a sliding window of its length)");
  cmd->add_option("--temperature", f->sampling.temperature, "softmax temperature; 0 = greedy (the most likely token)");
  cmd->add_option("--top-k", f->sampling.top_k, "sample among the k most likely tokens (0 = all)");
  cmd->add_option("--top-p", f->sampling.top_p, "sample among the most likely tokens holding this probability (1 = all)");
  cmd->add_option("--seed", f->sampling.seed, "the sampling stream's seed: the same seed gives the same text");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "a SentencePiece model (PATH.model) instead of the run's tokenizer (data.source's)");
  cmd->add_flag("--no-cache", f->no_cache, "recompute the whole sequence for every token (for benchmarks)");
  cmd->add_flag("--timing", f->timing, "print the prefill's and each further token's time on stderr");
  return [cmd, f](dist::Runtime&) {
    if (*cmd) run_generate(*f);
  };
}

}  // namespace loom::cli

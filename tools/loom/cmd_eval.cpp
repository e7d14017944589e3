// `loom eval`: a checkpoint's loss and perplexity on a token file, in one process.
#include <nlohmann/json.hpp>

#include <iostream>

#include "commands.h"
#include "loom/generate/evaluate.h"

namespace loom::cli {

Action add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "a checkpoint's loss and perplexity on a token file (any layout, one process)");
  struct Flags {
    std::string checkpoint;
    generate::EvalOptions options;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--checkpoint", f->checkpoint, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")
      ->required();
  cmd->add_option("--data", f->options.data, "a token file of `loom data prepare` (or text:PATH, its bytes)")->required();
  cmd->add_option("--seq", f->options.seq, "tokens each window predicts (0: the model's seq_len)");
  cmd->add_option("--batch", f->options.batch, "windows per forward pass");
  cmd->add_option("--windows", f->options.windows, "the most windows read (0: every whole one)");
  cmd->add_option("--logits", f->options.logits, "also write the first batch's ids and logits to this safetensors file");
  return [cmd, f](dist::Runtime&) {
    if (!*cmd) return;
    generate::LoadedModel model = generate::load_model(f->checkpoint);
    const generate::EvalResult r = generate::evaluate(model, f->options);
    std::cout << nlohmann::json{{"checkpoint", model.dir}, {"step", model.step}, {"windows", r.windows},
                                {"tokens", r.tokens}, {"loss", r.loss}, {"perplexity", r.perplexity}}.dump()
              << "\n";
  };
}

}  // namespace loom::cli

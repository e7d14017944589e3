#include <cmath>
#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/core/error.h"
#include "loom/dist/input_agreement.h"
#include "loom/train/trainer.h"

namespace loom::cli {
Action add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model from a config");
  auto config = std::make_shared<ConfigOptions>();
  auto options = std::make_shared<train::TrainOptions>();
  auto quiet = std::make_shared<bool>(false);
  config->add_to(*cmd);
  cmd->add_option("--metrics", options->metrics_path, "write one JSON object per step to FILE");
  cmd->add_option("--trace", options->trace_path, "write a Chrome trace (opens in Perfetto) to FILE");
  auto* peak = cmd->add_option("--peak-flops", options->peak_flops, "GEMM FLOP/s for MFU (default: measured at start)");
  cmd->add_flag("--quiet,-q", *quiet, "no progress lines");
  return [cmd, config, options, quiet, peak](dist::Runtime& runtime) {
    if (!*cmd) return;
    // Every rank reads the config; all agree before going on (dist/input_agreement.h).
    Config loaded;
    std::exception_ptr failure;
    try {
      loaded = config->load();
      LOOM_CHECK_INPUT(peak->count() == 0 || (std::isfinite(options->peak_flops) && options->peak_flops > 0),
                       "--peak-flops {} must be a positive number of FLOP/s (e.g. 1e11), or omitted to measure it",
                       options->peak_flops);
      // Rank 0 writes the metrics and the trace (every rank's events): check before anyone trains.
      if (runtime.world().rank() == 0) {
        std::vector<PathUse> outputs;
        if (!options->metrics_path.empty()) outputs.push_back({options->metrics_path, "--metrics"});
        if (!options->trace_path.empty()) outputs.push_back({options->trace_path, "--trace"});
        check_output_paths(config->inputs(loaded), outputs);
      }
    } catch (const InputError&) {
      failure = std::current_exception();
    }
    dist::agree_on_input(runtime.world(), failure);
    train::Trainer trainer(std::move(loaded), runtime.world());
    if (runtime.world().rank() == 0)  // after every check: a refused run prints only its error
      for (const std::string& warning : config_warnings(trainer.config())) std::cerr << "loom: warning: " << warning << '\n';
    options->progress = *quiet ? nullptr : &std::cout;
    options->interrupts = &runtime.interrupts();
    runtime.interrupts().arm();  // from here a signal stops the run after its step
    trainer.run(*options);
  };
}

}  // namespace loom::cli

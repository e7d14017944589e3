#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/core/error.h"
#include "loom/dist/input_agreement.h"
#include "loom/train/trainer.h"

namespace loom::cli {
namespace {

// The directory of `path` exists and is writable (nothing is created yet).
void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::string where = dir.empty() ? "." : dir.string();
  LOOM_CHECK_INPUT(::access(where.c_str(), W_OK) == 0, "{} {}: the directory '{}' does not exist or is not writable",
                   flag, path, where);
}

}  // namespace

Action add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model from a config");
  auto config = std::make_shared<ConfigOptions>();
  auto options = std::make_shared<train::TrainOptions>();
  auto quiet = std::make_shared<bool>(false);
  config->add_to(*cmd);
  cmd->add_option("--metrics", options->metrics_path, "write one JSON object per step to FILE");
  cmd->add_option("--trace", options->trace_path, "write a Chrome trace (opens in Perfetto) to FILE");
  cmd->add_option("--peak-flops", options->peak_flops, "GEMM FLOP/s for MFU (default: measured at start)");
  cmd->add_flag("--quiet,-q", *quiet, "no progress lines");
  return [cmd, config, options, quiet](dist::Runtime& runtime) {
    if (!*cmd) return;
    // Every rank reads the config; all agree before going on (dist/input_agreement.h).
    Config loaded;
    std::exception_ptr failure;
    try {
      loaded = config->load();
      // Rank 0 writes the metrics and the trace (every rank's events): check before anyone trains.
      if (runtime.world().rank() == 0) {
        check_writable(options->metrics_path, "--metrics");
        check_writable(options->trace_path, "--trace");
      }
    } catch (const InputError&) {
      failure = std::current_exception();
    }
    dist::agree_on_input(runtime.world(), failure);
    train::Trainer trainer(std::move(loaded), runtime.world());
    options->progress = *quiet ? nullptr : &std::cout;
    trainer.run(*options);
  };
}

}  // namespace loom::cli

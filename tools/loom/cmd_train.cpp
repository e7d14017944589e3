#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/ckpt/checkpoint_dir.h"
#include "loom/core/error.h"
#include "loom/plan/gemm_peak.h"
#include "loom/plan/profile.h"
#include "loom/train/profile_run.h"
#include "loom/cuda/placement.h"
#include "loom/dist/input_agreement.h"
#include "loom/dist/topology.h"
#include "loom/train/auto_layout.h"
#include "loom/train/trainer.h"

namespace loom::cli {
namespace {

// NOTE [Fault injection]: LOOM_FAULT="rank=R,step=S,kind=throw|hang|save-hang" makes rank R fail:
// `throw` raises an error at the start of step S (counted from 0; the CLI must end every rank
// with it), `hang` stops taking part in collectives there (the others' time-outs must end the
// job), `save-hang` stops after writing its file of the checkpoint of step S (counted from 1,
// as checkpoints are), before the ranks agree: a save killed half way. Used by the failure and
// checkpoint tests; read here, at the edge, and handed to the trainer as hooks.
void add_fault_hooks(train::TrainOptions& options) {
  const char* spec = std::getenv("LOOM_FAULT");
  if (spec == nullptr) return;
  int rank = -1;
  long long step = -1;
  char kind_text[16] = {0};
  const bool parsed = std::sscanf(spec, "rank=%d,step=%lld,kind=%15s", &rank, &step, kind_text) == 3;
  const std::string kind = kind_text;
  LOOM_CHECK_INPUT(parsed && (kind == "throw" || kind == "hang" || kind == "save-hang"),
                   "LOOM_FAULT = \"{}\" is not rank=R,step=S,kind=throw|hang|save-hang", spec);
  const auto hang = [] { std::this_thread::sleep_for(std::chrono::hours(1)); };
  if (kind == "save-hang") {
    options.after_checkpoint_file = [rank, step, hang](int my_rank, int64_t at) {
      if (my_rank == rank && at == step) hang();
    };
    return;
  }
  options.before_step = [rank, step, hang, kind](int my_rank, int64_t at) {
    if (my_rank != rank || at != step) return;
    if (kind == "hang") hang();
    throw Error(fmt::format("injected fault at step {} (LOOM_FAULT)", step));
  };
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
  auto* peak = cmd->add_option("--peak-flops", options->peak_flops, "GEMM FLOP/s for MFU (default: measured at start)");
  cmd->add_flag("--quiet,-q", *quiet, "no progress lines");
  auto resume = std::make_shared<std::string>();
  cmd->add_option("--resume", *resume,
                  "continue from a checkpoint: \"auto\" (the latest in checkpoint.dir, or start fresh) or its directory");
  auto init = std::make_shared<std::string>();
  cmd->add_option("--init", *init, "start from a checkpoint's weights (step 0, a fresh optimizer): checkpoint.init");
  cmd->add_option("--stop-after", options->stop_after,
                  "end the run after step K as a preemption would (saving a checkpoint when checkpoint.dir is set)");
  return [cmd, config, options, quiet, peak, resume, init](dist::Runtime& runtime) {
    if (!*cmd) return;
    // Every rank reads the config; all agree before going on (dist/input_agreement.h).
    Config loaded;
    std::string cluster_cache;  // parallel.auto's (NOTE [parallel.auto])
    std::exception_ptr failure;
    try {
      loaded = config->load();
      if (!init->empty()) loaded.checkpoint.init = *init;
      // NOTE [Devices]: a device this rank cannot train on is refused before parallel.auto measures.
      cuda::check_trainable(loaded, cuda::place_this_rank(loaded, runtime.world().local_rank(),
                                                           runtime.world().local_ranks(),
                                                           [&runtime] { return dist::backend_missing(runtime.device_backend()); }));
      if (loaded.parallel.auto_layout)
        cluster_cache = train::local_cluster_cache(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
      LOOM_CHECK_INPUT(peak->count() == 0 || (std::isfinite(options->peak_flops) && options->peak_flops > 0),
                       "--peak-flops {} must be a positive number of FLOP/s (e.g. 1e11), or omitted to measure it",
                       options->peak_flops);
      LOOM_CHECK_INPUT(options->stop_after >= 0, "--stop-after {} must be a step >= 1 (or 0: run to the end)",
                       options->stop_after);
      add_fault_hooks(*options);
      // Rank 0 writes the metrics and the trace (every rank's events): check before anyone trains.
      if (runtime.world().rank() == 0) {
        std::vector<PathUse> outputs;
        if (!options->metrics_path.empty()) outputs.push_back({options->metrics_path, "--metrics"});
        if (!options->trace_path.empty()) outputs.push_back({options->trace_path, "--trace"});
        ckpt::check_outside_checkpoints(outputs, loaded.checkpoint.dir);
        check_output_paths(config->inputs(loaded), outputs);
      }
    } catch (const InputError&) {
      failure = std::current_exception();
    }
    dist::agree_on_input(runtime.world(), failure);
    train::AutoLayout chosen;  // parallel.auto: the plan's layout replaces the config's
    if (loaded.parallel.auto_layout) {
      chosen = train::choose_layout(loaded, runtime.world(), cluster_cache);
      loaded = chosen.config;
    }
    train::Trainer trainer(std::move(loaded), runtime.world(), *resume, models::ModelKinds::builtin(),
                           runtime.device_backend());
    const std::string spans = dist::host_span_warning(trainer.mesh());  // NOTE [Hosts in the mesh]
    if (runtime.world().rank() == 0) {  // after every check: a refused run prints only its error
      std::cout << chosen.report << std::flush;
      if (!spans.empty()) std::cerr << "loom: warning: " << spans << '\n';
      for (const std::string& warning : chosen.warnings) std::cerr << "loom: warning: " << warning << '\n';
      const std::string threads = plan::profile_threads_warning(trainer.config().memory.profile,
                                                                trainer.plan().profile_threads,
                                                                train::run_threads(trainer.config(), runtime.world()));
      if (!threads.empty()) std::cerr << "loom: warning: " << threads << '\n';
      for (const std::string& warning : config_warnings(trainer.config())) std::cerr << "loom: warning: " << warning << '\n';
    }
    options->progress = *quiet ? nullptr : &std::cout;
    options->interrupts = &runtime.interrupts();
    runtime.interrupts().arm();  // from here a signal stops the run after its step
    trainer.run(*options);
  };
}

}  // namespace loom::cli

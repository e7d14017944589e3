#pragma once
// The CLI's subcommands. Each `add_*` registers its options on the app and returns the action to
// run when that subcommand was chosen. The CLI stays thin: parsing here, work in libloom.
#include <CLI/CLI.hpp>

#include <functional>

#include "loom/mpi/runtime.h"

namespace loom::cli {

using Action = std::function<void(dist::Runtime&)>;

Action add_train(CLI::App& app);
Action add_config(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_data(CLI::App& app);
Action add_schedule(CLI::App& app);
Action add_ckpt(CLI::App& app);
Action add_profile(CLI::App& app);
Action add_simulate(CLI::App& app);
Action add_plan(CLI::App& app);
Action add_generate(CLI::App& app);
Action add_plot(CLI::App& app);
Action add_eval(CLI::App& app);

}  // namespace loom::cli

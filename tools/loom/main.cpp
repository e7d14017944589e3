// loom: the command-line entry point. Every error ends here as one line on stderr,
// `loom: error: <message>`, with exit code 2 for bad input and 1 for failures at run time.
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "loom/api/program.h"
#include "loom/core/blas_kernel.h"
#include "loom/version.h"

int main(int argc, char** argv) {
  loom::select_blas_kernel(argv);  // NOTE [BLAS kernel]: may execute loom again, before MPI starts
  CLI::App app{"loom: train large neural networks across many processes", "loom"};
  app.set_version_flag("--version", std::string("loom ") + loom::kVersion);
  app.require_subcommand(1);
  const std::vector<loom::cli::Action> actions{loom::cli::add_train(app), loom::cli::add_config(app),
                                               loom::cli::add_bench(app), loom::cli::add_data(app),
                                               loom::cli::add_schedule(app), loom::cli::add_ckpt(app),
                                               loom::cli::add_profile(app), loom::cli::add_simulate(app),
                                               loom::cli::add_plan(app), loom::cli::add_generate(app),
                                               loom::cli::add_plot(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << fmt::format("loom: error: {}; hint: loom --help\n", e.what());
    return 2;
  }
  return loom::run_program([&](loom::dist::Runtime& runtime) {  // NOTE [Program errors]
    for (const auto& action : actions)
      if (action) action(runtime);
  });
}

// loom: the command-line entry point. Every error ends here as one line on stderr,
// `loom: error: <message>`, with exit code 2 for bad input and 1 for failures at run time.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <iostream>

#include "commands.h"
#include "loom/core/blas_kernel.h"
#include "loom/core/error.h"
#include "loom/dist/input_agreement.h"
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
  // Communication time-out: how long a rank waits for a peer before declaring the job stuck.
  double timeout_s = 300.0;
  if (const char* text = std::getenv("LOOM_COMM_TIMEOUT_S"); text != nullptr) {
    char* end = nullptr;
    timeout_s = std::strtod(text, &end);
    if (end == text || *end != '\0' || !(timeout_s > 0) || !std::isfinite(timeout_s)) {
      std::cerr << fmt::format("loom: error: LOOM_COMM_TIMEOUT_S = \"{}\" is not a positive number of seconds\n", text);
      return 2;
    }
  }
  std::unique_ptr<loom::dist::Runtime> runtime_holder;
  try {
    runtime_holder = std::make_unique<loom::dist::Runtime>(timeout_s);
  } catch (const loom::InputError& e) {  // a launch loom cannot run under (srun without PMI)
    std::cerr << "loom: error: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "loom: error: " << e.what() << '\n';
    return 1;
  }
  loom::dist::Runtime& runtime = *runtime_holder;
  const int rank = runtime.world().rank(), size = runtime.world().size();
  // A failure at run time on any rank ends every rank: print it, then abort the whole job.
  auto fail = [&](const char* what, int code) {
    std::cerr << (size > 1 ? fmt::format("loom: error: [rank {}] {}\n", rank, what) : fmt::format("loom: error: {}\n", what))
              << std::flush;
    if (size > 1) runtime.abort_all(code);
    return code;
  };
  try {
    for (const auto& action : actions)
      if (action) action(runtime);
    return 0;
  } catch (const loom::AgreedError& e) {  // every rank stopped at the same point: rank 0 says why
    if (rank == 0) std::cerr << (e.is_error() ? "loom: error: " : "loom: ") << e.what() << '\n' << std::flush;
    return e.exit_code();
  } catch (const loom::dist::SilentInputError&) {
    return 2;  // the first rank that refused the input printed why
  } catch (const loom::dist::AgreedInputError& e) {
    std::cerr << "loom: error: " << e.what() << '\n';
    return 2;
  } catch (const loom::InputError& e) {
    if (size == 1) {
      std::cerr << "loom: error: " << e.what() << '\n';
      return 2;
    }
    return fail(e.what(), 2);  // refused on this rank alone: the others must not wait for it
  } catch (const loom::Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}

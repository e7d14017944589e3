// loom: the command-line entry point. Every error ends here as one line on stderr,
// `loom: error: <message>`, with exit code 2 for bad input and 1 for failures at run time.
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/version.h"

int main(int argc, char** argv) {
  CLI::App app{"loom: train large neural networks across many processes", "loom"};
  app.set_version_flag("--version", std::string("loom ") + loom::kVersion);
  app.require_subcommand(1);
  const std::vector<loom::cli::Action> actions{loom::cli::add_train(app), loom::cli::add_config(app),
                                               loom::cli::add_bench(app), loom::cli::add_data(app)};
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
  try {
    for (const auto& action : actions)
      if (action) action();
    return 0;
  } catch (const loom::Error& e) {
    std::cerr << "loom: error: " << e.what() << '\n';
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "loom: error: " << e.what() << '\n';
    return 1;
  }
}
